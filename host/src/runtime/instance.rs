//! One processor instance serving one shard: its store, its limits, and the
//! three calls of the `record-processor` export.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{v0_1, v0_2, CheckpointError, LogLevel, ProcessorError, ShardInfo, ShutdownReason};
use super::checkpoint::{CheckpointFuture, CheckpointSink, Checkpoints};
use super::guest_log::{self, GuestOutput, Speaker};
use super::processor::Pre;
use super::Processor;
use crate::records::{Batch, Position};

/// Why a call into a processor failed. Only the shard it serves is affected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CallError {
    /// The processor asked for the same input again later.
    #[error("processor returned a retryable error: {0}")]
    Retryable(String),
    /// The processor said it cannot go on.
    #[error("processor returned a fatal error: {0}")]
    Fatal(String),
    /// The call ran past the configured deadline and was stopped.
    #[error("processor call ran longer than its deadline of {0:?} and was stopped")]
    DeadlineExceeded(Duration),
    /// The processor tried to grow its memory past the cap.
    #[error(
        "processor needed more memory than its limit of {} MiB and was stopped; if it needs more, \
         raise --memory-limit-mib", .0 >> 20
    )]
    MemoryLimit(usize),
    /// The processor trapped (a panic, an `unreachable`, a bad memory access...).
    #[error("processor trapped: {0}")]
    Trap(String),
    /// The caller withdrew the call while it ran (see
    /// [`ShardInstance::withdraw_when`]); its result would not have been used.
    #[error("processor call was stopped: its result could no longer be used")]
    Withdrawn,
}

impl CallError {
    /// Whether the same instance may be called again (the processor itself
    /// returned the error); after any other error the instance is unusable.
    pub fn instance_survives(&self) -> bool {
        matches!(self, CallError::Retryable(_) | CallError::Fatal(_))
    }
}

/// The data in each instance's store.
pub(crate) struct ShardState {
    /// Whose log lines these are: the shard and the version serving it.
    speaker: Speaker,
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryCap,
    checkpoints: Checkpoints,
    /// When the current call must stop (wall clock).
    call_ends: Instant,
    /// Stops a running call once it returns true.
    withdrawn: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    /// Set when a call was stopped because of `withdrawn`.
    was_withdrawn: bool,
}

/// [`StoreLimits`], remembering whether it refused a memory growth so a
/// resulting trap can be reported as what it is.
struct MemoryCap {
    limits: StoreLimits,
    refused: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }
}

impl WasiView for ShardState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl v0_2::kcl::processor::types::Host for ShardState {}
impl v0_1::kcl::processor::types::Host for ShardState {}

impl ShardState {
    /// At every epoch tick and host call: stops a call that was withdrawn,
    /// so a guest cannot act (log a record, checkpoint) once its result is
    /// unwanted.
    fn check_withdrawn(&mut self) -> wasmtime::Result<()> {
        if self.withdrawn.as_ref().is_some_and(|withdrawn| withdrawn()) {
            self.was_withdrawn = true;
            return Err(Trap::Interrupt.into());
        }
        Ok(())
    }
}

impl v0_2::kcl::processor::checkpointer::Host for ShardState {
    async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.checkpoint_last().await)
    }

    async fn checkpoint_at_index(&mut self, index: u32) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.checkpoint_at_index(index).await)
    }

    async fn checkpoint_at(&mut self, sequence_number: String, sub_sequence_number: Option<u64>) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.checkpoint_at_sequence(&sequence_number, sub_sequence_number).await)
    }
}

impl v0_2::kcl::processor::log::Host for ShardState {
    async fn log(&mut self, level: LogLevel, message: String) -> wasmtime::Result<()> {
        self.check_withdrawn()?;
        guest_log::emit(&self.speaker, level, &message);
        Ok(())
    }
}

/// The 0.1 imports: the same calls, in 0.1's types.
mod v0_1_imports {
    use super::*;
    use v0_1::kcl::processor::types::CheckpointError as V1Error;

    fn v1(result: Result<(), CheckpointError>) -> Result<(), V1Error> {
        result.map_err(|e| match e {
            CheckpointError::LeaseLost => V1Error::LeaseLost,
            CheckpointError::InvalidSequenceNumber(m) => V1Error::InvalidSequenceNumber(m),
            CheckpointError::Unavailable(m) => V1Error::Unavailable(m),
        })
    }

    impl v0_1::kcl::processor::checkpointer::Host for ShardState {
        async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), V1Error>> {
            self.check_withdrawn()?;
            Ok(v1(self.checkpoints.checkpoint_last().await))
        }

        async fn checkpoint_at(&mut self, sequence_number: String, sub: Option<u64>) -> wasmtime::Result<Result<(), V1Error>> {
            self.check_withdrawn()?;
            Ok(v1(self.checkpoints.checkpoint_at_sequence(&sequence_number, sub).await))
        }
    }

    impl v0_1::kcl::processor::log::Host for ShardState {
        async fn log(&mut self, level: v0_1::kcl::processor::log::Level, message: String) -> wasmtime::Result<()> {
            use v0_1::kcl::processor::log::Level;
            let level = match level {
                Level::Trace => LogLevel::Trace,
                Level::Debug => LogLevel::Debug,
                Level::Info => LogLevel::Info,
                Level::Warn => LogLevel::Warn,
                Level::Error => LogLevel::Error,
            };
            v0_2::kcl::processor::log::Host::log(self, level, message).await
        }
    }
}

/// A sink for instances that must never checkpoint (the load-time check).
pub(crate) struct NoCheckpoints;

impl CheckpointSink for NoCheckpoints {
    fn checkpoint(&mut self, _: Position) -> CheckpointFuture<'_> {
        Box::pin(async { Err(CheckpointError::Unavailable("this instance only checks the component".into())) })
    }
}

/// A processor instance bound to one shard.
pub struct ShardInstance {
    store: Store<ShardState>,
    processor: Exports,
    limits: Limits,
    /// Set once a call trapped: wasmtime forbids entering the instance again.
    poisoned: bool,
}

impl Processor {
    /// A fresh instance for `shard`, whose checkpoints go to `sink`.
    /// `last_checkpoint` is where the shard was last checkpointed, if at a
    /// record; checkpoints before it are refused.
    pub async fn instantiate(
        &self,
        shard: &str,
        sink: Box<dyn CheckpointSink>,
        last_checkpoint: Option<Position>,
    ) -> Result<ShardInstance, CallError> {
        let runtime = self.runtime();
        let config = runtime.config();
        let speaker = Speaker { shard: shard.into(), processor: self.describe().into() };
        // The builder's defaults are the sandbox: no preopened directories,
        // no environment, no arguments, no sockets.
        let wasi = WasiCtxBuilder::new()
            .stdout(GuestOutput::stdout(speaker.clone()))
            .stderr(GuestOutput::stderr(speaker.clone()))
            .build();
        let memory = MemoryCap {
            limits: StoreLimitsBuilder::new().memory_size(config.memory_limit).build(),
            refused: false,
        };
        let state = ShardState {
            speaker,
            wasi,
            table: ResourceTable::new(),
            memory,
            checkpoints: Checkpoints::new(sink, last_checkpoint),
            call_ends: Instant::now() + config.call_deadline,
            withdrawn: None,
            was_withdrawn: false,
        };
        let mut store = Store::new(runtime.engine(), state);
        store.limiter(|state| &mut state.memory);
        // At every epoch tick a running guest yields to the async runtime
        // (so a busy guest never holds a worker thread that renewals and I/O
        // need), and is stopped once its call is past the deadline.
        store.epoch_deadline_callback(|mut store| {
            let state = store.data_mut();
            if Instant::now() >= state.call_ends {
                return Ok(UpdateDeadline::Interrupt);
            }
            state.check_withdrawn()?;
            Ok(UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now())))
        });
        store.set_epoch_deadline(1);

        let limits = Limits { call_deadline: config.call_deadline, memory_limit: config.memory_limit };
        let processor = match self.pre() {
            Pre::V0_2(pre) => pre.instantiate_async(&mut store).await.map(Exports::V0_2),
            Pre::V0_1(pre) => pre.instantiate_async(&mut store).await.map(Exports::V0_1),
        };
        match processor {
            Ok(processor) => Ok(ShardInstance { store, processor, limits, poisoned: false }),
            Err(e) => Err(limits.classify(e, &store)),
        }
    }
}

impl Processor {
    /// Starts a throwaway instance and calls `initialize` on it, then
    /// `shutdown(requested)`: what a swap checks before touching any shard.
    pub async fn check_initialize(&self) -> Result<(), CallError> {
        // Its log lines say whose they are: no shard's.
        let mut instance = self.instantiate("(test instance)", Box::new(NoCheckpoints), None).await?;
        let shard = ShardInfo {
            stream_name: "test-instance".into(),
            shard_id: "test-instance".into(),
            starting_checkpoint: "TRIM_HORIZON".into(),
            starting_sub_sequence_number: None,
        };
        instance.initialize(&shard).await?;
        instance.shutdown(ShutdownReason::Requested).await
    }
}

/// What a failed call is measured against.
#[derive(Clone, Copy)]
struct Limits {
    call_deadline: Duration,
    memory_limit: usize,
}

impl Limits {
    /// Names a trap for what caused it.
    fn classify(self, error: wasmtime::Error, store: &Store<ShardState>) -> CallError {
        if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            if store.data().was_withdrawn {
                CallError::Withdrawn
            } else {
                CallError::DeadlineExceeded(self.call_deadline)
            }
        } else if store.data().memory.refused {
            CallError::MemoryLimit(self.memory_limit)
        } else {
            CallError::Trap(format!("{error:?}"))
        }
    }
}

/// An instance's `record-processor`, by contract version.
enum Exports {
    V0_2(v0_2::Processor),
    V0_1(v0_1::Processor),
}

impl ShardInstance {
    /// The version this is an instance of ([`Processor::describe`]).
    pub fn processor(&self) -> &str {
        &self.store.data().speaker.processor
    }

    /// Calls `initialize` with where delivery starts.
    pub async fn initialize(&mut self, shard: &ShardInfo) -> Result<(), CallError> {
        self.begin_call()?;
        let result = match &self.processor {
            Exports::V0_2(p) => p.kcl_processor_record_processor().call_initialize(&mut self.store, shard).await,
            Exports::V0_1(p) => {
                let shard = v0_1::kcl::processor::types::ShardInfo {
                    stream_name: shard.stream_name.clone(),
                    shard_id: shard.shard_id.clone(),
                    starting_checkpoint: shard.starting_checkpoint.clone(),
                    starting_sub_sequence_number: shard.starting_sub_sequence_number,
                };
                p.kcl_processor_record_processor().call_initialize(&mut self.store, &shard).await.map(v1_result)
            }
        };
        self.finish_call(result)
    }

    /// Calls `process-records`. The batch's columns are moved into the call
    /// (no copy on the host side) and back, so it can be delivered again
    /// after a retryable error.
    pub async fn process_records(&mut self, batch: &mut Batch) -> Result<(), CallError> {
        self.begin_call()?;
        self.store.data_mut().checkpoints.delivering(batch);
        let result = match &self.processor {
            Exports::V0_2(p) => {
                let lowered = lower(batch);
                let result = p.kcl_processor_record_processor().call_process_records(&mut self.store, &lowered).await;
                restore(batch, lowered);
                result
            }
            Exports::V0_1(p) => {
                let lowered = lower_v0_1(batch);
                p.kcl_processor_record_processor().call_process_records(&mut self.store, &lowered).await.map(v1_result)
            }
        };
        let result = self.finish_call(result);
        self.store.data_mut().checkpoints.delivered(result.is_ok());
        result
    }

    /// Calls `shutdown`. After `lease-lost` every checkpoint is refused, even
    /// one made during this call.
    pub async fn shutdown(&mut self, reason: ShutdownReason) -> Result<(), CallError> {
        self.begin_call()?;
        if reason == ShutdownReason::LeaseLost {
            self.store.data_mut().checkpoints.lease_lost();
        }
        let result = match &self.processor {
            Exports::V0_2(p) => p.kcl_processor_record_processor().call_shutdown(&mut self.store, reason).await,
            Exports::V0_1(p) => {
                use v0_1::kcl::processor::types::ShutdownReason as V1;
                let reason = match reason {
                    ShutdownReason::ShardEnd => V1::ShardEnd,
                    ShutdownReason::LeaseLost => V1::LeaseLost,
                    ShutdownReason::Requested => V1::Requested,
                };
                p.kcl_processor_record_processor().call_shutdown(&mut self.store, reason).await.map(v1_result)
            }
        };
        self.finish_call(result)
    }

    /// Stops any call of this instance, within one epoch tick, once
    /// `withdrawn` returns true (the caller can no longer use its result);
    /// the call fails with [`CallError::Withdrawn`] and the instance is spent.
    pub fn withdraw_when(&mut self, withdrawn: Arc<dyn Fn() -> bool + Send + Sync>) {
        self.store.data_mut().withdrawn = Some(withdrawn);
    }

    /// Refuses every checkpoint from now on: the caller no longer holds the lease.
    pub fn revoke_checkpoints(&mut self) {
        self.store.data_mut().checkpoints.lease_lost();
    }

    fn begin_call(&mut self) -> Result<(), CallError> {
        if self.poisoned {
            return Err(CallError::Trap("the instance trapped earlier and cannot be called again".into()));
        }
        self.store.set_epoch_deadline(1);
        let state = self.store.data_mut();
        state.call_ends = Instant::now() + self.limits.call_deadline;
        state.memory.refused = false;
        Ok(())
    }

    fn finish_call(&mut self, result: wasmtime::Result<Result<(), ProcessorError>>) -> Result<(), CallError> {
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(ProcessorError::Retryable(message))) => Err(CallError::Retryable(message)),
            Ok(Err(ProcessorError::Fatal(message))) => Err(CallError::Fatal(message)),
            Err(error) => {
                self.poisoned = true;
                Err(self.limits.classify(error, &self.store))
            }
        }
    }
}

/// A 0.1 call's result in 0.2's types.
fn v1_result(result: Result<(), v0_1::kcl::processor::types::ProcessorError>) -> Result<(), ProcessorError> {
    use v0_1::kcl::processor::types::ProcessorError as V1;
    result.map_err(|e| match e {
        V1::Retryable(m) => ProcessorError::Retryable(m),
        V1::Fatal(m) => ProcessorError::Fatal(m),
    })
}

/// Moves a batch's columns into the other batch type: the record path's
/// `Batch` and the WIT 0.2 `batch` have the same fields.
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

/// The batch as the 0.2 call takes it; [`restore`] puts it back.
fn lower(batch: &mut Batch) -> v0_2::kcl::processor::types::Batch {
    move_columns!(std::mem::take(batch) => v0_2::kcl::processor::types::Batch)
}

fn restore(batch: &mut Batch, lowered: v0_2::kcl::processor::types::Batch) {
    *batch = move_columns!(lowered => Batch);
}

/// The batch as a 0.1 component takes it: a list of records.
fn lower_v0_1(batch: &Batch) -> v0_1::kcl::processor::types::Batch {
    use v0_1::kcl::processor::types::KinesisRecord;
    let records = batch
        .iter()
        .map(|r| KinesisRecord {
            data: r.data.to_vec(),
            partition_key: r.partition_key.to_owned(),
            sequence_number: r.sequence_number.to_owned(),
            sub_sequence_number: r.sub_sequence_number,
            approximate_arrival_timestamp_ms: r.arrival_timestamp_ms,
            explicit_hash_key: r.explicit_hash_key.map(str::to_owned),
        })
        .collect();
    v0_1::kcl::processor::types::Batch { records, millis_behind_latest: batch.millis_behind_latest }
}
