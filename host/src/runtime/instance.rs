//! One processor instance serving one shard: its store, its limits, and the
//! three calls of the `record-processor` export.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{
    self, Batch, CheckpointError, LogLevel, ProcessorError, ShardInfo, ShutdownReason,
};
use super::checkpoint::{CheckpointFuture, CheckpointSink, Checkpoints};
use super::guest_log::{self, GuestOutput};
use super::sequence::Position;
use super::Processor;

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
    shard: Arc<str>,
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

impl bindings::kcl::processor::types::Host for ShardState {}

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

impl bindings::kcl::processor::checkpointer::Host for ShardState {
    async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.checkpoint_last().await)
    }

    async fn checkpoint_at(&mut self, sequence_number: String, sub_sequence_number: Option<u64>) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        let position = match Position::new(&sequence_number, sub_sequence_number) {
            Ok(position) => position,
            Err(e) => return Ok(Err(CheckpointError::InvalidSequenceNumber(e.to_string()))),
        };
        Ok(self.checkpoints.checkpoint_at(position).await)
    }
}

impl bindings::kcl::processor::log::Host for ShardState {
    async fn log(&mut self, level: LogLevel, message: String) -> wasmtime::Result<()> {
        self.check_withdrawn()?;
        guest_log::emit(&self.shard, level, &message);
        Ok(())
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
    processor: bindings::Processor,
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
        let shard: Arc<str> = shard.into();
        // The builder's defaults are the sandbox: no preopened directories,
        // no environment, no arguments, no sockets.
        let wasi = WasiCtxBuilder::new()
            .stdout(GuestOutput::stdout(shard.clone()))
            .stderr(GuestOutput::stderr(shard.clone()))
            .build();
        let memory = MemoryCap {
            limits: StoreLimitsBuilder::new().memory_size(config.memory_limit).build(),
            refused: false,
        };
        let state = ShardState {
            shard,
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
        match self.pre().instantiate_async(&mut store).await {
            Ok(processor) => Ok(ShardInstance { store, processor, limits, poisoned: false }),
            Err(e) => Err(limits.classify(e, &store)),
        }
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

impl ShardInstance {
    /// Calls `initialize` with where delivery starts.
    pub async fn initialize(&mut self, shard: &ShardInfo) -> Result<(), CallError> {
        self.begin_call()?;
        let result = self.processor.kcl_processor_record_processor().call_initialize(&mut self.store, shard).await;
        self.finish_call(result)
    }

    /// Calls `process-records`. The batch is borrowed so it can be delivered
    /// again after a retryable error.
    pub async fn process_records(&mut self, batch: &Batch) -> Result<(), CallError> {
        self.begin_call()?;
        self.store.data_mut().checkpoints.delivering(batch);
        let result = self.processor.kcl_processor_record_processor().call_process_records(&mut self.store, batch).await;
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
        let result = self.processor.kcl_processor_record_processor().call_shutdown(&mut self.store, reason).await;
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
