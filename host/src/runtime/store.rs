//! What each instance's [`Store`] holds, and the sandbox around it: WASI
//! with nothing granted, a memory cap, a deadline per call (epoch
//! interruption), and a way to withdraw a running call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_config::WasiConfigVariables;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::checkpoint::{CheckpointFuture, CheckpointSink, Checkpoints};
use super::guest_log::{GuestOutput, Speaker};
use super::outbound::OutboundHooks;
use super::output::OutputSink;
use super::state::{KeyedState, StateChanges};
use super::{CallError, CheckpointError, Runtime};
use crate::records::Position;

/// The data in each instance's store.
pub(crate) struct ShardState {
    /// Whose log lines these are: the shard and the version serving it.
    pub(super) speaker: Speaker,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    outbound: OutboundHooks,
    /// `--var` values, read through `wasi:config/store`.
    vars: Arc<WasiConfigVariables>,
    table: ResourceTable,
    memory: MemoryCap,
    pub(super) checkpoints: Checkpoints,
    /// When the current call must stop (wall clock).
    call_ends: Instant,
    /// Stops a running call once it returns true.
    pub(super) withdrawn: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
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

impl WasiHttpView for ShardState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.outbound }
    }
}

impl ShardState {
    /// At every epoch tick and host call: stops a call that was withdrawn,
    /// so a guest cannot act (log a record, checkpoint) once its result is
    /// unwanted.
    pub(super) fn check_withdrawn(&mut self) -> wasmtime::Result<()> {
        if self.withdrawn.as_ref().is_some_and(|withdrawn| withdrawn()) {
            self.was_withdrawn = true;
            return Err(Trap::Interrupt.into());
        }
        Ok(())
    }
}

/// The `--var` values, as `wasi:config/store` reads them.
pub(super) fn config_vars(state: &mut ShardState) -> wasmtime_wasi_config::WasiConfig<'_> {
    wasmtime_wasi_config::WasiConfig::from(&*state.vars)
}

/// A fresh store for one shard's instance, sandboxed and limited by
/// `runtime`'s settings; its checkpoints go to `sink`, its outputs to
/// `outputs`, its state is `state`.
pub(super) fn new_store(
    runtime: &Runtime,
    speaker: Speaker,
    sink: Box<dyn CheckpointSink>,
    outputs: Box<dyn OutputSink>,
    state: KeyedState,
    last_checkpoint: Option<Position>,
) -> Store<ShardState> {
    let config = runtime.config();
    // The builder's defaults are the sandbox: no preopened directories,
    // no environment, no arguments, no sockets. HTTP goes out only where
    // --allow-outbound says (OutboundHooks).
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
        http: WasiHttpCtx::new(),
        outbound: OutboundHooks { policy: config.outbound.clone() },
        vars: runtime.vars(),
        table: ResourceTable::new(),
        memory,
        checkpoints: Checkpoints::new(sink, outputs, state, last_checkpoint),
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
    store
}

/// What a failed call is measured against: the runtime's limits.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    pub(super) call_deadline: Duration,
    pub(super) memory_limit: usize,
}

impl Limits {
    /// The limits of `runtime`'s instances.
    pub(super) fn of(runtime: &Runtime) -> Self {
        let config = runtime.config();
        Limits { call_deadline: config.call_deadline, memory_limit: config.memory_limit }
    }

    /// Arms the store for a new call: a fresh deadline, no refusal yet.
    pub(super) fn begin_call(self, store: &mut Store<ShardState>) {
        store.set_epoch_deadline(1);
        let state = store.data_mut();
        state.call_ends = Instant::now() + self.call_deadline;
        state.memory.refused = false;
    }

    /// Names a trap for what caused it.
    pub(super) fn classify(self, error: wasmtime::Error, store: &Store<ShardState>) -> CallError {
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

/// A sink for instances that must never checkpoint (the load-time check).
pub(super) struct NoCheckpoints;

impl CheckpointSink for NoCheckpoints {
    fn checkpoint<'a>(&'a mut self, _: Position, _: &'a StateChanges) -> CheckpointFuture<'a> {
        Box::pin(async { Err(CheckpointError::Unavailable("this instance only checks the component".into())) })
    }
}
