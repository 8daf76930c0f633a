//! What each instance's [`Store`] holds, and the sandbox around it: WASI
//! with nothing granted, a memory cap, a deadline per call (epoch
//! interruption), and a way to withdraw a running call.

use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Memory that several instances share — a shard's with `--parallelism`:
/// what any of them grows counts against one limit, and what an instance
/// held is given back when it is dropped.
#[derive(Debug)]
pub struct SharedMemory {
    limit: usize,
    used: AtomicUsize,
}

impl SharedMemory {
    /// `limit` bytes for all the instances together.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { limit, used: AtomicUsize::new(0) })
    }

    /// Bytes the instances hold now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit under the limit.
    fn take(&self, bytes: usize) -> bool {
        self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(bytes).filter(|total| *total <= self.limit)).is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// [`StoreLimits`], and the [`SharedMemory`] the instance counts against
/// if any, remembering whether it refused a memory growth so a resulting
/// trap can be reported as what it is.
struct MemoryCap {
    limits: StoreLimits,
    refused: bool,
    /// The shared budget, what this instance took from it, and its last
    /// growth (given back if the growth then fails).
    shared: Option<(Arc<SharedMemory>, usize, usize)>,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let mut allowed = self.limits.memory_growing(current, desired, maximum)?;
        if let Some((shared, taken, last)) = self.shared.as_mut().filter(|_| allowed) {
            let growth = desired.saturating_sub(current);
            allowed = shared.take(growth);
            if allowed {
                (*taken, *last) = (*taken + growth, growth);
            }
        }
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        if let Some((shared, taken, last)) = self.shared.as_mut() {
            let last = std::mem::take(last);
            shared.give_back(last);
            *taken -= last;
        }
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }
}

impl MemoryCap {
    /// Gives back what this instance took from the shared budget, and
    /// counts nothing more against it.
    fn release(&mut self) {
        if let Some((shared, taken, _)) = self.shared.take() {
            shared.give_back(taken);
        }
    }
}

impl Drop for MemoryCap {
    fn drop(&mut self) {
        self.release();
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
    /// See [`ShardInstance::retire`](super::ShardInstance::retire).
    pub(super) fn release_shared_memory(&mut self) {
        self.memory.release();
    }

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
    shared: Option<Arc<SharedMemory>>,
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
        shared: shared.map(|shared| (shared, 0, 0)),
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
