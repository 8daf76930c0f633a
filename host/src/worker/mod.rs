//! The worker: the one place that ties leases, shards, fetching and the
//! component runtime together.
//!
//! At start it reads the control table (the deployed version, and whether
//! another live process uses its worker id), writes its heartbeat, syncs
//! shards to leases and takes every lease it should at once. Then, each in
//! its own rhythm:
//! - the heartbeat and the renewals, every third of the failover time, each
//!   in a task of its own (`upkeep.rs`), no renewal waiting on another (in
//!   heartbeat mode each beat renews the leases, and the renewal task only
//!   renews a lease the heartbeat no longer covers);
//! - the heartbeats of the fleet, every [`watch::poll_interval`] for the
//!   two watchers and less often for the others ([`FleetWatch::read_every`]),
//!   and at the moment a worker would die: a worker that joined, stopped or
//!   died starts a take pass at once (which also gives back leases above
//!   this worker's share, after a checkpoint; a watcher in a large fleet
//!   takes every lease a departed worker left, and gives the excess back a
//!   read interval later);
//! - a take pass every two failover times (Java KCL's taker interval) —
//!   rarely while every lease is held by
//!   a live kcl-host worker, whose heartbeats announce what could change
//!   that ([`Coordinator::pass_interval`]) — at once when a lease is lost or another worker left leases to
//!   take ([`LeaseNews`], which this worker writes when it creates leases,
//!   finishes a shard or gives one back), sooner when a lease of an owner
//!   without heartbeat can expire, when this worker is short of its share,
//!   or while its heartbeat is overdue;
//! - a shard sync every sync interval, on the last pass's read of the table (a take pass
//!   follows one that created leases), and at once when a shard ends, so children start right after their parents.

pub mod command;
pub mod in_flight;
mod redelivery;
mod shard_loop;
mod shards;
mod start;
mod upkeep;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::admin::Health;
use crate::aws::{AwsClients, AwsError};
use crate::config::WorkerConfig;
use crate::lease::coordinator::Coordinator;
use crate::lease::dynamo::DynamoStore;
use crate::lease::heartbeat::{HeartbeatTable, LeaseNews};
use crate::lease::table::KeyedTable;
use crate::lease::watch::{self, FleetWatch};
use crate::lease::{LeaseError, LeaseKey};
use crate::metrics::{progress, Metrics};
use crate::runtime::Processor;
use crate::swap::deploy::Deployed;
use crate::swap::fleet::Follower;
use crate::swap::rollout::CallReport;
use crate::swap::Swapper;
use shard_loop::Outcome;
use shards::{Balance, Held, ShardLoops};
use upkeep::sync_shards;

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A Kinesis or DynamoDB call failed (after its retries).
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The lease table could not be used.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The worker cannot go on with its settings; the message says why and what to change.
    #[error("{0}")]
    Refused(String),
}

impl WorkerError {
    /// The AWS call that failed, if that is what went wrong.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            WorkerError::Aws(e) | WorkerError::Lease(LeaseError::Aws(e)) => Some(e),
            WorkerError::Refused(_) | WorkerError::Lease(LeaseError::NoTransactions) => None,
        }
    }
}

/// What a worker did, for the summary printed at exit.
#[derive(Debug, Default)]
pub struct Summary {
    /// Records processed per shard.
    pub records: BTreeMap<String, u64>,
    /// Shards this worker processed to their end.
    pub finished: Vec<String>,
    /// Each processor version it settled on, the one it started with first
    /// (hash, and `name@version` when the component has them).
    pub versions: Vec<String>,
    /// How long the worker ran.
    pub elapsed: Duration,
    /// Records each output target acknowledged.
    pub outputs: BTreeMap<String, u64>,
    /// Records given up on and written to the failure target.
    pub dead_lettered: u64,
    /// Records given up on and skipped (no failure target).
    pub skipped: u64,
}

/// Consumes `config.streams` until `shutdown` resolves, with the processor
/// `swapper` holds. Each version it offers is rolled out: a canary shard
/// first, then every shard at its next batch boundary, rolled back if it
/// fails (see [`crate::swap::rollout`]).
pub async fn run(
    config: WorkerConfig,
    clients: AwsClients,
    swapper: Arc<Swapper>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Summary, WorkerError> {
    let mut worker = Worker::start(config, clients, swapper).await?;
    let refused = worker.run_until(shutdown).await;
    worker.stop().await;
    match refused {
        Some(reason) => Err(WorkerError::Refused(reason)),
        None => Ok(worker.summary),
    }
}

/// A running worker: its tables, its leases, its shard loops and its
/// upkeep tasks.
struct Worker {
    config: WorkerConfig,
    clients: AwsClients,
    /// The streams it reads, and how lease keys name their shards.
    streams: Arc<crate::stream::Streams>,
    started: Instant,
    me: String,
    process: String,
    store: Arc<DynamoStore>,
    control: HeartbeatTable,
    /// Where its progress row is (`status` and the dashboard read it).
    progress_table: KeyedTable,
    coordinator: Coordinator<DynamoStore>,
    fleet: FleetWatch,
    /// Leases this worker left for the others, for its heartbeat.
    news: Arc<LeaseNews>,
    swapper: Arc<Swapper>,
    follower: Follower,
    shards: ShardLoops,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    summary: Summary,
    /// How far from its share the last pass left this worker.
    balance: Balance,
    ended: mpsc::UnboundedReceiver<(Held, Outcome)>,
    reports: mpsc::UnboundedReceiver<CallReport>,
    processor: tokio::sync::watch::Receiver<Processor>,
    /// The heartbeat, the renewals and the progress row.
    upkeep: [JoinHandle<()>; 3],
    /// The admin listener, when there is one.
    admin: Option<JoinHandle<()>>,
    /// Publishing to CloudWatch or EMF, when asked for.
    publisher: Option<crate::metrics::publish::Publisher>,
    /// Says why, if another process took this worker id over.
    taken_over: mpsc::Receiver<String>,
}

impl Worker {
    /// The loop, until `shutdown` resolves or the worker must stop (the
    /// reason is returned). Each in its own rhythm: heartbeat reads, take
    /// passes, shard syncs, the rollout, and shard loops that end.
    async fn run_until(&mut self, shutdown: impl std::future::Future<Output = ()>) -> Option<String> {
        let mut last_read = Instant::now();
        let mut last_pass = Instant::now();
        let mut last_probe = Instant::now();
        let mut sync = tokio::time::interval(self.config.shard_sync_interval);
        sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sync.reset();
        tokio::pin!(shutdown);
        loop {
            self.health.loop_ran();
            self.health.short_of_share(self.balance.short);
            self.metrics.leases_held(self.shards.len());
            self.metrics.swap_buffer(self.shards.swap_buffer_used());
            let next_pass = last_pass + self.coordinator.pass_interval(self.balance.short, self.balance.above, &self.fleet);
            let take_at = self.coordinator.expiry_due().map_or(next_pass, |due| due.min(next_pass));
            let poll_at = self.fleet.next_read(last_read);
            let canary_due = self.shards.rollout.canary_due();
            let probe_at = self.coordinator.kcl3_probe_interval().map(|every| last_probe + every);
            let mut pass_now = false;
            let mut after_end = None;
            tokio::select! {
                _ = &mut shutdown => return None,
                Some(reason) = self.taken_over.recv() => {
                    // Nothing more may be delivered or written as this worker.
                    self.coordinator.liveness().revoke();
                    tracing::error!("{reason}; stopping");
                    return Some(reason);
                }
                _ = tokio::time::sleep_until(take_at) => pass_now = true,
                _ = tokio::time::sleep_until(poll_at) => {
                    last_read = Instant::now();
                    pass_now = self.poll_fleet().await;
                }
                Ok(()) = self.processor.changed() => {
                    let offered = self.processor.borrow_and_update().clone();
                    self.shards.offer(offered);
                    self.shards.tell(&self.swapper);
                }
                Some(report) = self.reports.recv() => {
                    if self.shards.report(&report) {
                        self.shards.tell(&self.swapper);
                    }
                }
                _ = tokio::time::sleep_until(canary_due.unwrap_or(take_at)), if canary_due.is_some() => {
                    self.shards.canary_idle();
                    self.shards.tell(&self.swapper);
                }
                _ = tokio::time::sleep_until(probe_at.unwrap_or(take_at)), if probe_at.is_some() => {
                    last_probe = Instant::now();
                    pass_now = upkeep::kcl3_joined(&self.store).await;
                }
                // New leases: this worker takes its share at once, as the others do on the news.
                _ = sync.tick() => pass_now = self.sync_shards().await,
                Some((held, outcome)) = self.ended.recv() => match self.shard_ended(held, outcome).await {
                    Ok(next) => {
                        pass_now = next.is_some();
                        after_end = next.flatten();
                    }
                    Err(reason) => return Some(reason),
                },
            }
            if pass_now {
                self.take_pass(after_end).await;
                last_pass = Instant::now();
            }
        }
    }

    /// Reads the fleet's heartbeats (and the deploy row); `true` when the
    /// fleet changed, so a take pass is due (covering the leases of a worker
    /// that died or stopped, when this worker is a watcher that does).
    async fn poll_fleet(&mut self) -> bool {
        let failover = self.config.take.failover_time;
        // Bounded: a read hung in an outage must not hold the loop once
        // DynamoDB is back, and one that slow may show a beat long gone.
        let deadline = watch::read_deadline(failover);
        let sent = Instant::now();
        let read = match tokio::time::timeout(deadline, self.control.read()).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                tracing::warn!("could not read the fleet's heartbeats: {e}");
                return false;
            }
            Err(_) => {
                tracing::warn!("reading the fleet's heartbeats took over {deadline:?}; trying again at the next poll");
                return false;
            }
        };
        // Liveness is judged on the clock of the read, never a later one.
        let read_at = Instant::now();
        self.follower.read(Deployed::in_read(&read));
        let change = self.coordinator.follow_fleet(&mut self.fleet, &read.heartbeats, sent, read_at);
        if change.is_new_fleet() {
            let now = self.fleet.fleet();
            tracing::info!(live = ?now.live, dead = ?now.dead, "the fleet changed");
        } else if change.is_change() {
            tracing::debug!("another worker left leases to take");
        }
        for (worker, heartbeat) in self.fleet.forgettable(read_at) {
            if let Err(e) = self.control.forget(&worker, heartbeat).await {
                tracing::warn!(worker = %worker, "could not delete a dead worker's heartbeat row: {e}");
            } else if let Err(e) = progress::forget(&self.progress_table, &worker).await {
                tracing::warn!(worker = %worker, "could not delete a dead worker's progress row: {e}");
            }
        }
        change.is_change()
    }

    /// A shard loop ended. `Ok(Some(_))` when a take pass is due (with the
    /// shard that ended, when that is why); `Err` with the reason when the
    /// worker must stop.
    async fn shard_ended(&mut self, held: Held, outcome: Outcome) -> Result<Option<Option<LeaseKey>>, String> {
        let key = held.key().to_owned();
        if let Some(delivered) = self.shards.ended(&held) {
            *self.summary.records.entry(key.to_string()).or_default() += delivered;
        }
        match outcome {
            Outcome::LeaseLost => {
                self.coordinator.consumer_ended(&held);
                // Lost to an outage rather than to another worker: take it back as soon as we may.
                Ok(Some(None))
            }
            Outcome::Stopped => {
                // Only a loop given back to balance stops while the worker runs.
                match self.coordinator.evict(&key).await {
                    Ok(true) => {
                        tracing::info!(shard = %key, "gave the lease back");
                        self.news.freed();
                    }
                    Ok(false) => tracing::warn!(shard = %key, "did not give the lease back: another worker had taken it already"),
                    Err(e) => tracing::warn!(shard = %key, "could not give the lease back (it will expire): {e}"),
                }
                Ok(None)
            }
            Outcome::Refused(reason) => {
                tracing::error!(shard = %key, "{reason}; stopping");
                if let Err(e) = self.coordinator.evict(&key).await {
                    tracing::warn!(shard = %key, "could not release the lease (it will expire): {e}");
                }
                Err(reason)
            }
            Outcome::ShardEnd { .. } => {
                // Before the pass that starts the children: they run what their parent ran.
                self.shards.shard_ended(&key);
                self.shards.tell(&self.swapper);
                self.coordinator.finished(&key);
                // Its children are ready for whichever worker has room.
                self.news.freed();
                self.summary.finished.push(key.to_string());
                // Children become ready the moment a parent ends: sync and take now.
                self.sync_shards().await;
                Ok(Some(Some(key)))
            }
        }
    }

    /// Creates the leases of shards the table lacks; `true` when it did
    /// (announced in this worker's heartbeat as leases to take).
    async fn sync_shards(&mut self) -> bool {
        match sync_shards(&self.streams, &self.clients, &self.store, self.coordinator.leases()).await {
            Ok(true) => {
                self.news.freed();
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!("shard sync failed: {e}");
                false
            }
        }
    }

    async fn take_pass(&mut self, after_end: Option<LeaseKey>) {
        match self.coordinator.take_pass().await {
            Ok(pass) => {
                let taken = pass.taken.len();
                self.balance = self.shards.apply(pass);
                if let Some(shard) = after_end {
                    tracing::info!(shard = %shard, "lease pass after the shard ended took {taken} leases");
                }
            }
            Err(e) => tracing::warn!("lease pass failed: {e}"),
        }
    }

    /// Graceful stop: `shutdown(requested)` everywhere, then the leases and
    /// the heartbeat row given back, so the others take over at once.
    async fn stop(&mut self) {
        let stopped = self.shards.stop_all().await;
        // Processors are done: stop renewing, then give the leases back.
        for task in &self.upkeep {
            task.abort();
        }
        while let Ok((held, outcome)) = self.ended.try_recv() {
            if let Outcome::ShardEnd { .. } = outcome {
                self.coordinator.finished(held.key());
                self.summary.finished.push(held.key().to_string());
            }
        }
        for (held, delivered) in stopped {
            let key = held.key();
            *self.summary.records.entry(key.to_string()).or_default() += delivered;
            if held.is_valid()
                && let Err(e) = self.coordinator.evict(key).await
            {
                tracing::warn!(shard = %key, "could not release the lease (it will expire): {e}");
            }
        }
        if let Some(admin) = &self.admin {
            admin.abort();
        }
        // The shards' last records and the leases given back, counted.
        if let Some(publisher) = self.publisher.take() {
            publisher.finish().await;
        }
        // The others notice at their next heartbeat read and take the leases.
        if let Err(e) = self.control.leave(&self.me, &self.process).await {
            tracing::warn!("could not delete this worker's heartbeat row (the others see it die instead): {e}");
        } else if let Err(e) = progress::forget(&self.progress_table, &self.me).await {
            tracing::warn!("could not delete this worker's progress row: {e}");
        }
        self.summary.elapsed = self.started.elapsed();
        self.summary.versions = self.shards.rollout.history().to_vec();
        self.summary.outputs = self.shards.outputs_written();
        (self.summary.dead_lettered, self.summary.skipped) = self.shards.given_up();
    }
}
