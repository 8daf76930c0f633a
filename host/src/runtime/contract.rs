//! Dispatch by contract version: which `kcl:processor` a component
//! implements, the linker that serves every version's imports, and the
//! three calls of `record-processor` in each version's types.

use wasmtime::component::{HasSelf, Linker};
use wasmtime::Store;

use super::bindings::{v0_1, v0_2};
use super::store::ShardState;
use super::{v0_1 as legacy, ProcessorError, Runtime, ShardInfo, ShutdownReason};
use crate::records::Batch;

/// The interface a processor must export, per contract version, newest first.
pub(crate) const RECORD_PROCESSOR_EXPORTS: [(&str, &str); 2] =
    [("0.2.0", "kcl:processor/record-processor@0.2.0"), ("0.1.0", "kcl:processor/record-processor@0.1.0")];

/// What a call returns before the runtime names its failure.
type Returned = wasmtime::Result<Result<(), ProcessorError>>;

/// A component ready to instantiate, by the contract version it implements.
pub(crate) enum Pre {
    V0_2(v0_2::ProcessorPre<ShardState>),
    V0_1(v0_1::ProcessorPre<ShardState>),
}

impl Pre {
    /// Checks that `pre`'s component fits the world of `version`.
    pub(super) fn new(version: &str, pre: wasmtime::component::InstancePre<ShardState>) -> wasmtime::Result<Self> {
        Ok(match version {
            "0.1.0" => Pre::V0_1(v0_1::ProcessorPre::new(pre)?),
            _ => Pre::V0_2(v0_2::ProcessorPre::new(pre)?),
        })
    }

    /// The contract version, as in [`RECORD_PROCESSOR_EXPORTS`].
    pub(super) fn version(&self) -> &'static str {
        match self {
            Pre::V0_2(_) => "0.2.0",
            Pre::V0_1(_) => "0.1.0",
        }
    }

    /// An instance in `store`.
    pub(super) async fn instantiate(&self, store: &mut Store<ShardState>) -> wasmtime::Result<Exports> {
        match self {
            Pre::V0_2(pre) => pre.instantiate_async(store).await.map(Exports::V0_2),
            Pre::V0_1(pre) => pre.instantiate_async(store).await.map(Exports::V0_1),
        }
    }
}

/// An instance's `record-processor`, by contract version.
pub(super) enum Exports {
    V0_2(v0_2::Processor),
    V0_1(v0_1::Processor),
}

impl Exports {
    pub(super) async fn initialize(&self, store: &mut Store<ShardState>, shard: &ShardInfo) -> Returned {
        match self {
            Exports::V0_2(p) => p.kcl_processor_record_processor().call_initialize(store, shard).await,
            Exports::V0_1(p) => {
                let shard = legacy::shard_info(shard);
                p.kcl_processor_record_processor().call_initialize(store, &shard).await.map(legacy::result)
            }
        }
    }

    /// `process-records`. The batch's columns are moved into the call (no
    /// copy on the host side) and back, so it can be delivered again.
    pub(super) async fn process_records(&self, store: &mut Store<ShardState>, batch: &mut Batch) -> Returned {
        match self {
            Exports::V0_2(p) => {
                let lowered = lower(batch);
                let result = p.kcl_processor_record_processor().call_process_records(&mut *store, &lowered).await;
                restore(batch, lowered);
                result
            }
            Exports::V0_1(p) => {
                let lowered = legacy::batch(batch);
                p.kcl_processor_record_processor().call_process_records(store, &lowered).await.map(legacy::result)
            }
        }
    }

    pub(super) async fn shutdown(&self, store: &mut Store<ShardState>, reason: ShutdownReason) -> Returned {
        match self {
            Exports::V0_2(p) => p.kcl_processor_record_processor().call_shutdown(store, reason).await,
            Exports::V0_1(p) => {
                let reason = legacy::shutdown_reason(reason);
                p.kcl_processor_record_processor().call_shutdown(store, reason).await.map(legacy::result)
            }
        }
    }
}

/// WASI (p2, sandboxed by each store's context) plus the `kcl:processor`
/// imports of every contract version.
pub(super) fn linker(runtime: &Runtime) -> wasmtime::Result<Linker<ShardState>> {
    let mut linker = Linker::new(runtime.engine());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    v0_2::Processor::add_to_linker::<_, HasSelf<ShardState>>(&mut linker, |state| state)?;
    v0_1::Processor::add_to_linker::<_, HasSelf<ShardState>>(&mut linker, |state| state)?;
    Ok(linker)
}

/// Moves a batch's columns into the other batch type: the record path's
/// `Batch` and the WIT `batch` have the same fields.
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

/// The batch as the call takes it; [`restore`] puts it back.
fn lower(batch: &mut Batch) -> v0_2::kcl::processor::types::Batch {
    move_columns!(std::mem::take(batch) => v0_2::kcl::processor::types::Batch)
}

fn restore(batch: &mut Batch, lowered: v0_2::kcl::processor::types::Batch) {
    *batch = move_columns!(lowered => Batch);
}
