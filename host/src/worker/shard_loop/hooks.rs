//! What a shard loop lends the failure policy's delivery loop (its hooks:
//! what to count, log and wait on) and the runtime (where checkpoints and
//! state go).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use super::{Outcome, ShardLoop};
use crate::failure::policy::Step;
use crate::failure::retrying::Retrying;
use crate::failure::{Condition, Hooks};
use crate::lease::coordinator::{CheckpointFailure, HeldLease};
use crate::lease::{Checkpoint, LeaseStore};
use crate::metrics::ShardMetrics;
use crate::records::{Batch, Position};
use crate::runtime::{CallError, CheckpointError, CheckpointFuture, CheckpointSink, KeyedState, Processor, StateChanges};
use crate::state::{StateCommit, StateTable, WindowIndex};
use crate::swap::rollout::CallReport;

/// What the failure policy's delivery loop counts, logs and waits on for a shard.
pub(super) struct ShardHooks<'a, S> {
    pub(super) shard_loop: &'a ShardLoop<S>,
    pub(super) processor: &'a Processor,
}

impl<S: LeaseStore> Hooks for ShardHooks<'_, S> {
    type Stop = Outcome;

    async fn pause(&self, wait: Duration) -> Result<(), Outcome> {
        self.shard_loop.wait(wait).await.map_or(Ok(()), Err)
    }

    fn check(&self) -> Result<(), Outcome> {
        if self.shard_loop.held.is_valid() { Ok(()) } else { Err(Outcome::LeaseLost) }
    }

    fn processed(&self, records: &Batch, took: Duration) {
        let _ = self.shard_loop.reports.send(CallReport { processor: self.processor.hash().to_owned(), ok: true });
        self.shard_loop.delivered.fetch_add(records.len() as u64, Ordering::Relaxed);
        self.shard_loop.metrics.processed(records.len(), records.data.len(), took);
    }

    fn failed(&self, error: &CallError, step: &Step, blame: bool) {
        let metrics = &self.shard_loop.metrics;
        metrics.guest_error(error);
        if blame {
            let _ = self.shard_loop.reports.send(CallReport { processor: self.processor.hash().to_owned(), ok: false });
        }
        match step {
            Step::Retry { bisected: true, .. } => metrics.failure_event("bisect"),
            Step::Retry { .. } | Step::Partial { .. } => metrics.failure_event("retry"),
            Step::GiveUp { .. } | Step::LeaseLost => return,
        }
        // A restart is logged where it happens, with the instance's end (and
        // the trap's backtrace once).
        if !matches!(step, Step::Retry { restart: true, .. }) {
            tracing::warn!(shard = %self.shard_loop.held.key(), processor = self.processor.describe(), "{error}; {step}");
        }
    }

    fn gave_up(&self, records: usize, condition: Condition, kept: bool) {
        let metrics = &self.shard_loop.metrics;
        metrics.failure_events(if kept { "dead-letter" } else { "skipped" }, records);
        let shard = self.shard_loop.held.key();
        let whereto = if kept { "wrote them to --on-failure" } else { "SKIPPED them (no --on-failure target)" };
        tracing::warn!(shard = %shard, processor = self.processor.describe(), "gave up on {records} records ({condition:?}) and {whereto}; the checkpoint moves past them");
    }

    fn retrying(&self, state: Option<Retrying>) {
        self.shard_loop.metrics.retry_attempts(state.as_ref().map_or(0, |r| r.attempts));
        self.shard_loop.retrying.set(self.shard_loop.held.key(), state);
    }
}

/// Writes a shard's checkpoints to the lease table through the held lease,
/// each with the state changes it covers (and, with `--window`, the open
/// window's index) in the same write.
pub(super) struct Committer<S> {
    pub(super) held: Arc<HeldLease<S>>,
    pub(super) metrics: ShardMetrics,
    /// Where state changes are committed, and the shard's stream.
    pub(super) state: Arc<StateTable>,
    pub(super) stream: String,
    /// With `--window`: the open window's index, committed beside the state.
    pub(super) window: Option<Arc<StdMutex<WindowIndex>>>,
}

impl<S: LeaseStore> Committer<S> {
    /// Writes `checkpoint` (with `SHARD_END`, the shard's `children`) and
    /// commits `changes` with it: both or neither.
    pub(super) async fn write(&self, checkpoint: Checkpoint, children: &BTreeSet<String>, changes: &StateChanges) -> Result<(), CheckpointFailure> {
        let index = self.window.as_ref().map(|window| window.lock().expect("not poisoned").commit_items(changes)).unwrap_or_default();
        let merged: StateChanges;
        let state = if index.is_empty() {
            changes
        } else {
            merged = changes.iter().map(|(k, v)| (k.clone(), v.clone())).chain(index).collect();
            &merged
        };
        let written = if state.is_empty() {
            self.held.checkpoint(checkpoint, children).await
        } else {
            match self.state.ensure().await {
                Ok(()) => {
                    let key = self.held.key();
                    let commit = StateCommit { table: self.state.name(), stream: &self.stream, shard: key.shard_id(), changes: state };
                    let started = std::time::Instant::now();
                    let committed = self.held.commit(checkpoint, children, &commit).await;
                    if committed.is_ok() {
                        self.metrics.state_committed(state.len(), started.elapsed());
                    }
                    committed
                }
                Err(e) => Err(CheckpointFailure::Unavailable(format!("the state table could not be made ready: {e}"))),
            }
        };
        self.metrics.checkpoint(written.is_ok());
        if written.is_ok()
            && let Some(window) = &self.window
        {
            window.lock().expect("not poisoned").committed();
        }
        written
    }
}

/// A checkpoint write's failure as the guest hears it.
pub(super) fn checkpoint_error(failure: CheckpointFailure) -> CheckpointError {
    match failure {
        CheckpointFailure::LeaseLost => CheckpointError::LeaseLost,
        CheckpointFailure::Unavailable(message) => CheckpointError::Unavailable(message),
    }
}

/// Writes a guest's checkpoints to the lease table (see [`Committer`]),
/// noting each for the consumer's re-delivery on a swap.
pub(super) struct LeaseSink<S> {
    pub(super) committer: Committer<S>,
    /// The last checkpoint written.
    pub(super) checkpointed: Arc<StdMutex<Option<Position>>>,
}

impl<S: LeaseStore> CheckpointSink for LeaseSink<S> {
    fn checkpoint<'a>(&'a mut self, position: Position, changes: &'a StateChanges) -> CheckpointFuture<'a> {
        Box::pin(async move {
            let written = self.committer.write(Checkpoint::At(position.clone()), &BTreeSet::new(), changes).await;
            if written.is_ok() {
                *self.checkpointed.lock().expect("not poisoned") = Some(position);
            }
            written.map_err(checkpoint_error)
        })
    }
}

/// The state an instance of `shard_loop`'s shard sees, with one instance
/// per shard: the stream's items in the state table, keys limited to the
/// lease's hash-key range. (Lanes read theirs through `parallel::state`.)
pub(super) async fn shard_state<S: LeaseStore>(shard_loop: &ShardLoop<S>) -> KeyedState {
    let lease = shard_loop.held.snapshot().await;
    KeyedState::new(Arc::new(shard_loop.state_source()), lease.hash_range())
}

/// Notes where a lane's instance is done, with `--parallelism` over 1: its
/// checkpoints mean "done up to here for my keys", and the host writes the
/// shard's checkpoint once every lane is done below it. The state changes
/// they cover are noted too, for the lane's call to hand over when it ends.
pub(super) struct LaneSink<S> {
    pub(super) held: Arc<HeldLease<S>>,
    pub(super) done_through: Arc<StdMutex<Option<Position>>>,
    pub(super) noted: Arc<StdMutex<StateChanges>>,
}

impl<S: LeaseStore> CheckpointSink for LaneSink<S> {
    fn checkpoint<'a>(&'a mut self, position: Position, changes: &'a StateChanges) -> CheckpointFuture<'a> {
        let noted = if self.held.is_valid() {
            let mut done = self.done_through.lock().expect("not poisoned");
            if done.as_ref().is_none_or(|done| *done < position) {
                *done = Some(position);
            }
            self.noted.lock().expect("not poisoned").extend(changes.iter().map(|(key, value)| (key.clone(), value.clone())));
            Ok(())
        } else {
            Err(CheckpointError::LeaseLost)
        };
        Box::pin(std::future::ready(noted))
    }
}
