//! One leased shard's loop: a processor instance fed from the shard's
//! reader, restarted from the last checkpoint when it fails (as
//! [`FailurePolicy`] says), swapped between batches, and shut down for the
//! right reason. With `--parallelism` over 1, [`parallel`] runs the attempt.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

mod end;
mod hooks;
mod parallel;
mod replace;
mod start;
mod window;

use super::in_flight::InFlightBoard;
use super::redelivery::{Budget, Unacknowledged};
use hooks::{Committer, LeaseSink, ShardHooks};
use start::{starting_position, Start};
pub use window::Windows;
use crate::aws::AwsError;
use crate::failure::retrying::RetryBoard;
use crate::failure::{self, deliver::Delivery, DeadLetters, Delivered, FailurePolicy, FailureSettings};
use crate::fetch::Fetched;
use crate::source::OpenReader;
use crate::lease::coordinator::{CheckpointFailure, HeldLease};
use crate::lease::{Checkpoint, LeaseStore};
use crate::metrics::ShardMetrics;
use crate::output::Outputs;
use crate::records::{Batch, Position};
use crate::state::{ShardStateSource, StateTable};
use crate::runtime::{CheckpointSink, KeyedState, Processor, ShardInfo, ShardInstance, SharedMemory};
use crate::swap::rollout::CallReport;

/// How a shard's loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every record delivered, `shutdown(shard-end)` ok, `SHARD_END` written.
    ShardEnd { children: BTreeSet<String> },
    /// Another worker holds the lease now.
    LeaseLost,
    /// The worker is stopping.
    Stopped,
    /// The lease cannot be processed with this worker's settings; the
    /// worker stops with this message.
    Refused(String),
}

/// What a shard's loop needs, shared with the worker.
pub struct ShardLoop<S> {
    /// The processor to run; a new value is a swap, done at the next batch boundary.
    pub processor: watch::Receiver<Processor>,
    /// Where the shard's records come from.
    pub reader: Arc<dyn OpenReader>,
    /// The stream's name, for the processor's `shard-info`.
    pub stream: String,
    /// The stream's initial timestamp, for a lease that starts AT_TIMESTAMP.
    pub initial_timestamp_ms: Option<i64>,
    /// The lease this loop runs under.
    pub held: Arc<HeldLease<S>>,
    /// Raised when the worker stops (or gives this lease back).
    pub stop: watch::Receiver<bool>,
    /// Records delivered and acknowledged by the processor.
    pub delivered: Arc<AtomicU64>,
    /// The shard's metrics.
    pub metrics: ShardMetrics,
    /// How each call of each processor version went, for the rollout.
    pub reports: mpsc::UnboundedSender<CallReport>,
    /// What all shards may keep for re-delivery after a swap.
    pub redelivery: Arc<Budget>,
    /// Where the processor's outputs go; flushed before each checkpoint.
    pub outputs: Arc<Outputs>,
    /// Where the processor's state is read and committed.
    pub state: Arc<StateTable>,
    /// The failure policy.
    pub failure: Arc<FailureSettings>,
    /// Where records given up on go.
    pub dead_letters: Arc<DeadLetters>,
    /// The worker's shards that are retrying, for the heartbeat.
    pub retrying: Arc<RetryBoard>,
    /// Instances processing the shard side by side (`--parallelism`); 1
    /// runs one, which checkpoints as it sees fit.
    pub parallelism: usize,
    /// Most records one call is given with `parallelism` over 1 (`--max-records`).
    pub call_records: usize,
    /// The worker's parallel shards' calls in flight, for the heartbeat.
    pub in_flight: Arc<InFlightBoard>,
    /// Tumbling windows (`--window`), with one instance per shard.
    pub windows: Windows,
    /// The memory the shard's instances share with `--parallelism` over 1
    /// (`--memory-limit-mib` for them all); none with one instance.
    pub memory: Option<Arc<SharedMemory>>,
}

/// Why one attempt at the shard ended early.
enum Interrupt {
    Done(Outcome),
    Failed(String),
}

impl<S: LeaseStore> ShardLoop<S> {
    /// Runs the shard until it ends, the lease is lost, or the worker stops.
    pub async fn run(self) -> Outcome {
        let shard = self.held.key().to_owned();
        let wait = self.held.deliver_after().saturating_duration_since(tokio::time::Instant::now());
        if !wait.is_zero() {
            tracing::info!(shard = %shard, "stolen lease: waiting {wait:?} for the previous owner to stop");
            if let Some(outcome) = self.wait(wait).await {
                return outcome;
            }
        }
        let mut policy = FailurePolicy::new(&self.failure);
        // Where the first failed attempt started delivering, for a lease with
        // no checkpoint yet at LATEST or AT_TIMESTAMP: a restart there again
        // would skip what that attempt was given.
        let mut first_delivered = None;
        loop {
            policy.instance_started();
            let error = match self.attempt(&mut policy, &mut first_delivered).await {
                Interrupt::Done(outcome) => return outcome,
                Interrupt::Failed(error) => error,
            };
            let wait = policy.restart_wait();
            self.metrics.restarted();
            tracing::warn!(shard = %shard, processor = self.processor.borrow().describe(), "{error}; restarting from the last checkpoint in {wait:?}");
            if let Some(outcome) = self.wait(wait).await {
                return outcome;
            }
        }
    }

    /// Waits `delay`, unless the worker stops or the lease is lost first.
    async fn wait(&self, delay: Duration) -> Option<Outcome> {
        tokio::select! {
            _ = tokio::time::sleep(delay) => None,
            outcome = self.interrupted() => Some(outcome),
        }
    }

    /// Resolves when the worker stops or the lease is lost.
    async fn interrupted(&self) -> Outcome {
        /// Resolves once `flag` is true; never, if its sender is gone.
        async fn raised(mut flag: watch::Receiver<bool>) {
            if flag.wait_for(|raised| *raised).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        tokio::select! {
            _ = raised(self.stop.clone()) => Outcome::Stopped,
            _ = raised(self.held.lost()) => Outcome::LeaseLost,
        }
    }

    /// One instance's life: from the last checkpoint until an outcome or a
    /// failure. `first_delivered` is where an earlier attempt without a
    /// checkpoint began, and is set by this one if it delivers first.
    async fn attempt(&self, policy: &mut FailurePolicy, first_delivered: &mut Option<String>) -> Interrupt {
        match self.held.recover_state(&crate::state::StateRecovery).await {
            Ok(()) => {}
            Err(CheckpointFailure::LeaseLost) => return Interrupt::Done(Outcome::LeaseLost),
            Err(CheckpointFailure::Unavailable(e)) => return Interrupt::Failed(format!("applying the state the shard's last owner committed failed: {e}")),
        }
        let lease = self.held.snapshot().await;
        let shard_id = lease.key.shard_id().to_owned();
        let (start, last_checkpoint) = match starting_position(&lease.checkpoint, first_delivered.as_deref(), self.initial_timestamp_ms) {
            Start::Read(start, last_checkpoint) => (start, last_checkpoint),
            Start::Finished => return Interrupt::Done(Outcome::ShardEnd { children: lease.children }),
            Start::Refused => {
                return Interrupt::Done(Outcome::Refused(format!(
                    "the lease of {shard_id} starts AT_TIMESTAMP but this worker has no timestamp; \
                     start it with --initial-position AT_TIMESTAMP --initial-timestamp <RFC 3339>, \
                     as the worker that created the lease was"
                )));
            }
        };
        if self.parallelism > 1 {
            let interrupt = self.attempt_parallel(&lease, start, first_delivered).await;
            self.in_flight.set(self.held.key(), None);
            return interrupt;
        }
        if let Err(interrupt) = self.load_windows().await {
            return interrupt;
        }
        let checkpointed = Arc::new(StdMutex::new(last_checkpoint.clone()));
        let mut running = self.processor.clone().borrow_and_update().clone();
        let state = hooks::shard_state(self).await;
        let mut instance = match self.open(&running, &lease.checkpoint, last_checkpoint, self.lease_sink(&checkpointed), state).await {
            Ok(instance) => instance,
            Err(interrupt) => return interrupt,
        };
        let mut processor_rx = self.processor.clone();
        processor_rx.mark_unchanged();
        let mut unacknowledged = Unacknowledged::new(self.redelivery.clone());
        let range = lease.hash_range();
        let mut fetcher = self.reader.open(&self.stream, &shard_id, start, range);
        loop {
            // Between two batches: the next one, a stop, or a swap.
            let fetched = tokio::select! {
                fetched = fetcher.next() => fetched,
                outcome = self.interrupted() => return self.finish_outcome(&mut instance, outcome).await,
                Ok(()) = processor_rx.changed() => {
                    running = processor_rx.borrow_and_update().clone();
                    match self.swap(instance, &running, policy, &checkpointed, &mut unacknowledged).await {
                        Ok(swapped) => instance = swapped,
                        Err(interrupt) => return interrupt,
                    }
                    continue;
                }
            };
            let Fetched { batch, shard_end, reads, read_at_ms } = match fetched {
                Ok(fetched) => fetched,
                // Waiting cannot bring a deleted stream back: the worker stops and says why.
                Err(AwsError::StreamNotFound(stream)) => {
                    return Interrupt::Done(Outcome::Refused(format!(
                        "Kinesis stream `{stream}` no longer exists (it was deleted while this worker read it)"
                    )));
                }
                Err(e) => return Interrupt::Failed(format!("reading the shard failed: {e}")),
            };
            self.metrics.get_records(reads);
            self.metrics.millis_behind_latest(batch.millis_behind_latest);
            let at_tip = batch.millis_behind_latest == 0;
            for (window, mut batch) in self.windows.pieces(batch) {
                if let Err(interrupt) = self.enter_window(&mut instance, window).await {
                    return interrupt;
                }
                if batch.is_empty() {
                    continue;
                }
                if !lease.checkpoint.has_started() && first_delivered.is_none() {
                    *first_delivered = batch.get(0).map(|first| first.sequence_number.to_owned());
                }
                let interrupt = self.deliver(&mut instance, &running, policy, &mut batch).await;
                // Kept for a swap, or a restart after a failure: the records
                // since the checkpoint are not read again.
                unacknowledged.delivered(batch, checkpointed.lock().expect("not poisoned").as_ref());
                match interrupt {
                    None => {}
                    Some(Interrupt::Failed(why)) => {
                        match self.restart_in_place(why, (&mut running, &mut processor_rx), policy, &checkpointed, &mut unacknowledged).await {
                            Ok(restarted) => instance = restarted,
                            Err(interrupt) => return interrupt,
                        }
                    }
                    Some(interrupt) => return interrupt,
                }
            }
            if (at_tip || shard_end.is_some())
                && let Err(interrupt) = self.close_if_over(&mut instance, shard_end.is_some(), read_at_ms).await
            {
                return interrupt;
            }
            if let Some(children) = shard_end {
                return self.end_shard(std::slice::from_mut(&mut instance), children).await;
            }
        }
    }

    /// Where the instance's checkpoints go with one instance per shard: to
    /// the lease, noting each in `checkpointed`.
    fn lease_sink(&self, checkpointed: &Arc<StdMutex<Option<Position>>>) -> Box<dyn CheckpointSink> {
        Box::new(LeaseSink { committer: self.committer(), checkpointed: checkpointed.clone() })
    }

    /// The shard's committed state, as the state table holds it.
    fn state_source(&self) -> ShardStateSource {
        ShardStateSource { table: self.state.clone(), stream: self.stream.clone(), metrics: self.metrics.clone() }
    }

    /// Writes the shard's checkpoints with the state they cover.
    fn committer(&self) -> Committer<S> {
        Committer {
            held: self.held.clone(),
            metrics: self.metrics.clone(),
            state: self.state.clone(),
            stream: self.stream.clone(),
            window: self.windows.index(),
        }
    }

    /// A fresh instance of `processor` for this shard, initialized from
    /// `checkpoint` (its column) / `last_checkpoint` (its position), its
    /// checkpoints going to `sink` and its state read from `state`.
    async fn open(
        &self,
        processor: &Processor,
        checkpoint: &Checkpoint,
        last_checkpoint: Option<Position>,
        sink: Box<dyn CheckpointSink>,
        state: KeyedState,
    ) -> Result<ShardInstance, Interrupt> {
        let shard_id = self.held.key().shard_id().to_owned();
        let outputs = Box::new(self.outputs.shard());
        // Its log lines name the lease key: with several streams, that names the stream too.
        let mut instance = match processor.instantiate_with_outputs(self.held.key(), sink, outputs, state, last_checkpoint.clone(), self.memory.clone()).await {
            Ok(instance) => instance,
            Err(e) => return Err(Interrupt::Failed(format!("instantiating the processor failed: {e}"))),
        };
        self.metrics.version(processor.hash(), processor.component(), processor.contract_version());
        // A call still running when the lease's validity ends is stopped:
        // nothing is delivered once another worker may own the shard.
        let held = self.held.clone();
        instance.withdraw_when(Arc::new(move || !held.is_valid()));
        let info = ShardInfo {
            stream_name: self.stream.clone(),
            shard_id,
            starting_checkpoint: checkpoint.as_column().to_owned(),
            starting_sub_sequence_number: last_checkpoint.as_ref().map(Position::sub_sequence_number).filter(|sub| *sub > 0),
        };
        if let Err(e) = instance.initialize(&info).await {
            let _ = self.reports.send(CallReport { processor: processor.hash().to_owned(), ok: false });
            return Err(Interrupt::Failed(format!("initialize failed: {e}")));
        }
        Ok(instance)
    }

    /// Delivers one batch under the failure policy (see [`crate::failure`]).
    async fn deliver(&self, instance: &mut ShardInstance, processor: &Processor, policy: &mut FailurePolicy, batch: &mut Batch) -> Option<Interrupt> {
        let described = processor.describe();
        let delivery = Delivery { policy, dead_letters: &self.dead_letters, stream: &self.stream, shard: self.held.key().shard_id(), version: processor.hash(), processor: described };
        match failure::deliver(instance, batch, delivery, &ShardHooks { shard_loop: self, processor }).await {
            Delivered::Done => None,
            Delivered::Restart(why) => Some(Interrupt::Failed(why)),
            Delivered::Stopped(outcome) => Some(self.finish_outcome(instance, outcome).await),
            Delivered::LeaseLost => {
                tracing::warn!(shard = %self.held.key(), processor = described, "the lease's validity ran out during process-records: call stopped, batch not delivered");
                // The stopped call spent the instance: no shutdown can run in it.
                Some(Interrupt::Done(Outcome::LeaseLost))
            }
        }
    }
}

#[cfg(test)]
mod tests;
