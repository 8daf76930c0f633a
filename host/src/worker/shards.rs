//! The worker's shard loops, one per held lease: started from a take pass,
//! told of swaps by the rollout, stopped to give a lease back, and all
//! stopped at the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::in_flight::InFlightBoard;
use super::redelivery::Budget;
use super::shard_loop::{Outcome, ShardLoop, Windows};
use crate::lease::coordinator::{HeldLease, TakePass};
use crate::lease::dynamo::DynamoStore;
use crate::lease::LeaseKey;
use crate::metrics::{Metrics, ShardMetrics};
use crate::failure::retrying::RetryBoard;
use crate::failure::{DeadLetters, FailureSettings};
use crate::output::Outputs;
use crate::state::StateTable;
use crate::runtime::{Processor, SharedMemory};
use crate::shard::InitialPosition;
use crate::source::OpenReader;
use crate::stream::Streams;
use crate::swap::rollout::{self, CallReport, Rollout};
use crate::swap::Swapper;

/// Longest a graceful stop waits for processors to shut down.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a graceful stop that is not done says what it waits for.
const STOP_TELL_AFTER: Duration = Duration::from_secs(2);

/// A lease this worker holds, as the worker's loop passes it around.
pub(super) type Held = Arc<HeldLease<DynamoStore>>;

/// A running shard loop as the worker sees it.
struct Running {
    held: Held,
    delivered: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    /// The processor this shard should run: a new value swaps it.
    processor: watch::Sender<Processor>,
    metrics: ShardMetrics,
}

/// What every shard loop is made from.
pub(super) struct Template {
    pub(super) reader: Arc<dyn OpenReader>,
    /// The streams, to tell which one a lease's shard is of.
    pub(super) streams: Arc<Streams>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) redelivery: Arc<Budget>,
    /// The declared output targets.
    pub(super) outputs: Arc<Outputs>,
    /// The application's state table (made on first use).
    pub(super) state: Arc<StateTable>,
    /// The failure policy.
    pub(super) failure: Arc<FailureSettings>,
    /// Where records given up on go.
    pub(super) dead_letters: Arc<DeadLetters>,
    /// The shards retrying now, for the heartbeat.
    pub(super) retrying: Arc<RetryBoard>,
    /// Instances per shard (`--parallelism`).
    pub(super) parallelism: usize,
    /// The parallel shards' calls in flight, for the heartbeat.
    pub(super) in_flight: Arc<InFlightBoard>,
    /// Most records one call is given (`--max-records`).
    pub(super) call_records: usize,
    /// Tumbling windows' length (`--window`).
    pub(super) window: Option<Duration>,
    /// What the instances of one shard may use together (`--memory-limit-mib`).
    pub(super) memory_limit: usize,
}

/// How far from its share the last take pass left this worker.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Balance {
    /// Short of it while another worker is above it: pass again soon.
    pub(super) short: bool,
    /// Above it (after covering a departure): pass again once the others
    /// have read the fleet, to give the excess back.
    pub(super) above: bool,
}

/// The shard loops of this worker, one per held lease, and the rollout
/// that tells them which processor to run.
pub(super) struct ShardLoops {
    template: Template,
    pub(super) rollout: Rollout,
    tasks: JoinSet<()>,
    running: BTreeMap<LeaseKey, Running>,
    ended: mpsc::UnboundedSender<(Held, Outcome)>,
    reports: mpsc::UnboundedSender<CallReport>,
}

impl ShardLoops {
    /// No loops yet; each tells `ended` how it ended, and `reports` how
    /// each of its calls went.
    pub(super) fn new(
        template: Template,
        rollout: Rollout,
        ended: mpsc::UnboundedSender<(Held, Outcome)>,
        reports: mpsc::UnboundedSender<CallReport>,
    ) -> Self {
        Self { template, rollout, tasks: JoinSet::new(), running: BTreeMap::new(), ended, reports }
    }

    /// How many shards run.
    pub(super) fn len(&self) -> usize {
        self.running.len()
    }

    /// Records each output target acknowledged so far.
    pub(super) fn outputs_written(&self) -> BTreeMap<String, u64> {
        self.template.outputs.written()
    }

    /// Records given up on so far: written to the failure target, skipped.
    pub(super) fn given_up(&self) -> (u64, u64) {
        (self.template.dead_letters.written(), self.template.dead_letters.skipped())
    }

    /// Bytes kept for re-delivery after a swap, over all shards.
    pub(super) fn swap_buffer_used(&self) -> usize {
        self.template.redelivery.used()
    }

    fn spawn(&mut self, held: Held) {
        let (stop, stop_rx) = watch::channel(false);
        let stream = self.template.streams.of(held.key()).expect("the coordinator takes only leases of this worker's streams");
        let metrics = self.template.metrics.shard(&stream.name, held.key());
        metrics.source(stream.source.label());
        let (processor, processor_rx) = watch::channel(self.rollout.current().clone());
        let delivered = Arc::new(AtomicU64::new(0));
        let shard_loop = ShardLoop {
            processor: processor_rx,
            reader: self.template.reader.clone(),
            stream: stream.name.clone(),
            initial_timestamp_ms: match stream.initial_position {
                InitialPosition::AtTimestamp(ms) => Some(ms),
                _ => None,
            },
            held: held.clone(),
            stop: stop_rx,
            delivered: delivered.clone(),
            metrics: metrics.clone(),
            reports: self.reports.clone(),
            redelivery: self.template.redelivery.clone(),
            outputs: self.template.outputs.clone(),
            state: self.template.state.clone(),
            failure: self.template.failure.clone(),
            dead_letters: self.template.dead_letters.clone(),
            retrying: self.template.retrying.clone(),
            parallelism: self.template.parallelism,
            in_flight: self.template.in_flight.clone(),
            call_records: self.template.call_records,
            windows: Windows::new(self.template.window, held.key().shard_id()),
            memory: (self.template.parallelism > 1).then(|| SharedMemory::new(self.template.memory_limit)),
        };
        let key = held.key().to_owned();
        let ended = self.ended.clone();
        tracing::info!(shard = %key, processor = self.rollout.current().describe(), "processing");
        self.running.insert(key, Running { held: held.clone(), delivered, stop, processor, metrics });
        // In the worker's span: every line of the shard names the worker.
        self.tasks.spawn(
            async move {
                let outcome = shard_loop.run().await;
                let _ = ended.send((held, outcome));
            }
            .in_current_span(),
        );
    }

    /// Starts loops for what a pass took and stops those of the leases it
    /// gives back; says how far from its share the worker is.
    pub(super) fn apply(&mut self, pass: TakePass<DynamoStore>) -> Balance {
        for held in pass.taken {
            self.template.metrics.lease_taken(held.was_stolen());
            self.spawn(held);
        }
        for key in &pass.release {
            tracing::info!(shard = %key, "giving the lease back to balance the fleet: checkpointing first");
            if let Some(running) = self.running.get(key) {
                running.stop.send_replace(true);
            }
        }
        Balance { short: pass.short, above: pass.above }
    }

    /// A new processor was offered: roll it out.
    pub(super) fn offer(&mut self, processor: Processor) {
        self.rollout.offer(processor, channels(&self.running));
    }

    /// A call ended: the rollout goes on, or back. Most calls are of a
    /// version not on trial, and cost nothing here.
    pub(super) fn report(&mut self, report: &CallReport) -> bool {
        if !self.rollout.on_trial(&report.processor) {
            return false;
        }
        self.rollout.report(report, channels(&self.running));
        true
    }

    /// The canary ran its idle time: the rollout goes on.
    pub(super) fn canary_idle(&mut self) {
        self.rollout.canary_idle(channels(&self.running));
    }

    /// A shard was processed to its end: a canary there promotes its version.
    pub(super) fn shard_ended(&mut self, key: &str) {
        self.rollout.shard_ended(key, channels(&self.running));
    }

    /// Tells `swapper` where the rollout stands (what the heartbeat reports,
    /// and what a new offer is compared with).
    pub(super) fn tell(&self, swapper: &Swapper) {
        swapper.record_rollout(self.rollout.current(), self.rollout.candidate());
    }

    /// Forgets the loop of `held` (not a newer one of the same shard);
    /// returns the records it delivered.
    pub(super) fn ended(&mut self, held: &Held) -> Option<u64> {
        let key = held.key();
        if self.running.get(key).is_some_and(|r| r.held.id() == held.id()) {
            let done = self.running.remove(key).expect("just checked");
            done.metrics.forget();
            self.template.retrying.set(key, None);
            return Some(done.delivered.load(Ordering::Relaxed));
        }
        None
    }

    /// Graceful stop: `shutdown(requested)` everywhere, waiting up to
    /// [`STOP_TIMEOUT`]; then forgets every loop, returning each one's lease
    /// and the records it delivered.
    pub(super) async fn stop_all(&mut self) -> Vec<(Held, u64)> {
        tracing::info!(shards = self.running.len(), "stopping: shutting down processors");
        for running in self.running.values() {
            running.stop.send_replace(true);
        }
        let tasks = &mut self.tasks;
        let stopped = async {
            // Say what the stop waits for when it is not quick: a call running up to its deadline.
            let mut tell = tokio::time::interval_at(Instant::now() + STOP_TELL_AFTER, STOP_TELL_AFTER);
            loop {
                tokio::select! {
                    joined = tasks.join_next() => if joined.is_none() { break },
                    _ = tell.tick() => tracing::info!(
                        "stopping: waiting for {} processors to shut down (a call may run up to --call-deadline; \
                         a second SIGINT or SIGTERM stops at once)",
                        tasks.len()
                    ),
                }
            }
        };
        if tokio::time::timeout(STOP_TIMEOUT, stopped).await.is_err() {
            tracing::warn!("processors did not stop within {STOP_TIMEOUT:?}; their leases expire instead");
            self.tasks.abort_all();
        }
        std::mem::take(&mut self.running).into_values().map(|done| (done.held, done.delivered.load(Ordering::Relaxed))).collect()
    }
}

/// Each running shard, for the rollout.
fn channels(running: &BTreeMap<LeaseKey, Running>) -> rollout::Shards<'_> {
    running
        .iter()
        .map(|(key, r)| (key.as_str(), rollout::Shard { processor: &r.processor, delivered: r.delivered.load(Ordering::Relaxed) }))
        .collect()
}
