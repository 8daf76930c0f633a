//! Dispatch by contract version: which `kcl:processor` a component
//! implements, the linker that serves every version's imports, and the
//! three calls of `record-processor` in each version's types.

use wasmtime::component::{HasSelf, Linker};
use wasmtime::Store;

use super::bindings::v0_4::windowed::exports::kcl::processor::window;
use super::bindings::{v0_1, v0_2, v0_3, v0_4};
use super::store::{self, ShardState};
use super::{ProcessorError, Runtime, ShardInfo, ShutdownReason, WindowBounds};
use crate::records::Batch;

/// Moves a batch's columns into the other batch type: the record path's
/// `Batch` and the WIT `batch` (0.2 to 0.4) have the same fields, so the
/// call takes them without a copy and gives them back.
macro_rules! move_columns {
    ($from:expr => $to:path) => {{
        let from = $from;
        $to {
            data: from.data,
            data_ends: from.data_ends,
            partition_keys: from.partition_keys,
            partition_key_ends: from.partition_key_ends,
            sequence_numbers: from.sequence_numbers,
            sequence_number_ends: from.sequence_number_ends,
            arrival_timestamps_ms: from.arrival_timestamps_ms,
            sub_sequence_numbers: from.sub_sequence_numbers,
            explicit_hash_keys: from.explicit_hash_keys,
            explicit_hash_key_ends: from.explicit_hash_key_ends,
            flags: from.flags,
            millis_behind_latest: from.millis_behind_latest,
        }
    }};
}

/// The interface a processor must export, per contract version, newest first.
pub(crate) const RECORD_PROCESSOR_EXPORTS: [(&str, &str); 4] = [
    ("0.4.0", "kcl:processor/record-processor@0.4.0"),
    ("0.3.0", "kcl:processor/record-processor@0.3.0"),
    ("0.2.0", "kcl:processor/record-processor@0.2.0"),
    ("0.1.0", "kcl:processor/record-processor@0.1.0"),
];

/// The interface a processor exports to be run with `--window`.
pub(crate) const WINDOW_EXPORT: &str = "kcl:processor/window@0.4.0";

/// What a call returns before the runtime names its failure.
type Returned = wasmtime::Result<Result<(), ProcessorError>>;

/// A component ready to instantiate, by the contract version it implements.
pub(crate) enum Pre {
    /// 0.4 keeps its own indices to load the optional `window` export from
    /// the same instance.
    V0_4 {
        instance_pre: wasmtime::component::InstancePre<ShardState>,
        indices: v0_4::ProcessorIndices,
        window: Option<window::GuestIndices>,
    },
    V0_3(v0_3::ProcessorPre<ShardState>),
    V0_2(v0_2::ProcessorPre<ShardState>),
    V0_1(v0_1::ProcessorPre<ShardState>),
}

impl Pre {
    /// Checks that `pre`'s component fits the world of `version`.
    pub(super) fn new(version: &str, pre: wasmtime::component::InstancePre<ShardState>) -> wasmtime::Result<Self> {
        Ok(match version {
            "0.1.0" => Pre::V0_1(v0_1::ProcessorPre::new(pre)?),
            "0.2.0" => Pre::V0_2(v0_2::ProcessorPre::new(pre)?),
            "0.3.0" => Pre::V0_3(v0_3::ProcessorPre::new(pre)?),
            _ => Pre::V0_4 { indices: v0_4::ProcessorIndices::new(&pre)?, window: window::GuestIndices::new(&pre).ok(), instance_pre: pre },
        })
    }

    /// Whether the component exports [`WINDOW_EXPORT`].
    pub(super) fn closes_windows(&self) -> bool {
        matches!(self, Pre::V0_4 { window: Some(_), .. })
    }

    /// The contract version, as in [`RECORD_PROCESSOR_EXPORTS`].
    pub(super) fn version(&self) -> &'static str {
        match self {
            Pre::V0_4 { .. } => "0.4.0",
            Pre::V0_3(_) => "0.3.0",
            Pre::V0_2(_) => "0.2.0",
            Pre::V0_1(_) => "0.1.0",
        }
    }

    /// An instance in `store`.
    pub(super) async fn instantiate(&self, store: &mut Store<ShardState>) -> wasmtime::Result<Exports> {
        match self {
            Pre::V0_4 { instance_pre, indices, window } => {
                let instance = instance_pre.instantiate_async(&mut *store).await?;
                let processor = indices.load(&mut *store, &instance)?;
                let window = window.as_ref().map(|window| window.load(&mut *store, &instance)).transpose()?;
                Ok(Exports::V0_4(processor, window))
            }
            Pre::V0_3(pre) => pre.instantiate_async(store).await.map(Exports::V0_3),
            Pre::V0_2(pre) => pre.instantiate_async(store).await.map(Exports::V0_2),
            Pre::V0_1(pre) => pre.instantiate_async(store).await.map(Exports::V0_1),
        }
    }
}

/// An instance's `record-processor`, by contract version.
pub(super) enum Exports {
    V0_4(v0_4::Processor, Option<window::Guest>),
    V0_3(v0_3::Processor),
    V0_2(v0_2::Processor),
    V0_1(v0_1::Processor),
}

impl Exports {
    pub(super) async fn initialize(&self, store: &mut Store<ShardState>, shard: &ShardInfo) -> Returned {
        match self {
            Exports::V0_4(p, _) => p.kcl_processor_record_processor().call_initialize(store, shard).await,
            Exports::V0_3(p) => p.kcl_processor_record_processor().call_initialize(store, shard).await,
            Exports::V0_2(p) => {
                let shard = super::v0_2::shard_info(shard);
                p.kcl_processor_record_processor().call_initialize(store, &shard).await.map(super::v0_2::result)
            }
            Exports::V0_1(p) => {
                let shard = super::v0_1::shard_info(shard);
                p.kcl_processor_record_processor().call_initialize(store, &shard).await.map(super::v0_1::result)
            }
        }
    }

    /// `process-records`. The batch's columns are moved into the call (no
    /// copy on the host side) and back, so it can be delivered again.
    pub(super) async fn process_records(&self, store: &mut Store<ShardState>, batch: &mut Batch) -> Returned {
        match self {
            Exports::V0_4(p, _) => {
                let lowered = move_columns!(std::mem::take(batch) => v0_4::kcl::processor::types::Batch);
                let result = p.kcl_processor_record_processor().call_process_records(&mut *store, &lowered).await;
                *batch = move_columns!(lowered => Batch);
                result
            }
            Exports::V0_3(p) => {
                let lowered = move_columns!(std::mem::take(batch) => v0_4::kcl::processor::types::Batch);
                let result = p.kcl_processor_record_processor().call_process_records(&mut *store, &lowered).await;
                *batch = move_columns!(lowered => Batch);
                result
            }
            Exports::V0_2(p) => {
                let lowered = move_columns!(std::mem::take(batch) => v0_2::kcl::processor::types::Batch);
                let result = p.kcl_processor_record_processor().call_process_records(&mut *store, &lowered).await;
                *batch = move_columns!(lowered => Batch);
                result.map(super::v0_2::result)
            }
            Exports::V0_1(p) => {
                let lowered = super::v0_1::batch(batch);
                p.kcl_processor_record_processor().call_process_records(store, &lowered).await.map(super::v0_1::result)
            }
        }
    }

    pub(super) async fn shutdown(&self, store: &mut Store<ShardState>, reason: ShutdownReason) -> Returned {
        match self {
            Exports::V0_4(p, _) => p.kcl_processor_record_processor().call_shutdown(store, reason).await,
            Exports::V0_3(p) => p.kcl_processor_record_processor().call_shutdown(store, reason).await,
            Exports::V0_2(p) => {
                let reason = super::v0_2::shutdown_reason(reason);
                p.kcl_processor_record_processor().call_shutdown(store, reason).await.map(super::v0_2::result)
            }
            Exports::V0_1(p) => {
                let reason = super::v0_1::shutdown_reason(reason);
                p.kcl_processor_record_processor().call_shutdown(store, reason).await.map(super::v0_1::result)
            }
        }
    }
}

impl Exports {
    /// `window.close`; a fatal error naming the export when the component has none.
    pub(super) async fn close_window(&self, store: &mut Store<ShardState>, bounds: WindowBounds, keys: &[String]) -> Returned {
        match self {
            Exports::V0_4(_, Some(window)) => window.call_close(store, bounds, keys).await,
            _ => Ok(Err(ProcessorError::Fatal(format!("the processor does not export `{WINDOW_EXPORT}`, so it cannot close windows")))),
        }
    }
}

/// WASI (p2, sandboxed by each store's context), `wasi:http` (allow-listed),
/// `wasi:config` (the `--var` values), plus the `kcl:processor` imports of
/// every contract version.
pub(super) fn linker(runtime: &Runtime) -> wasmtime::Result<Linker<ShardState>> {
    let mut linker = Linker::new(runtime.engine());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    wasmtime_wasi_config::add_to_linker(&mut linker, store::config_vars)?;
    v0_4::Processor::add_to_linker::<_, HasSelf<ShardState>>(&mut linker, |state| state)?;
    v0_3::Processor::add_to_linker::<_, HasSelf<ShardState>>(&mut linker, |state| state)?;
    v0_2::Processor::add_to_linker::<_, HasSelf<ShardState>>(&mut linker, |state| state)?;
    v0_1::Processor::add_to_linker::<_, HasSelf<ShardState>>(&mut linker, |state| state)?;
    Ok(linker)
}
