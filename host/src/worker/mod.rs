//! The worker: the one place that ties leases, shards, fetching and the
//! component runtime together.
//!
//! At start it reads the control table (the deployed version, and whether
//! another live process uses its worker id), writes its heartbeat, syncs
//! shards to leases and takes every lease it should at once. Then, each in
//! its own rhythm:
//! - the heartbeat and the renewals, every third of the failover time, each
//!   in a task of its own (`upkeep.rs`), no renewal waiting on another;
//! - the heartbeats of the fleet, every [`control::poll_interval`] and at the
//!   moment a worker would die: a worker that joined, stopped or died starts
//!   a take pass at once (which also gives back leases above this worker's
//!   share, after a checkpoint);
//! - a take pass every two failover times (Java KCL's taker interval), at
//!   once when a lease is lost, sooner when a lease of an owner without
//!   heartbeat can expire, when this worker is short of its share, or while
//!   its heartbeat is overdue;
//! - a shard sync every sync interval, on the last pass's read of the table,
//!   and at once when a shard ends, so children start right after their parents.

mod consumer;
mod redelivery;
mod upkeep;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::aws::{AwsClients, AwsError};
use crate::config::{Retrieval, WorkerConfig};
use crate::fetch::FetchSettings;
use crate::admin::{self, Health};
use crate::fanout::{self, KinesisSubscriptions};
use crate::metrics::{Metrics, ShardMetrics};
use crate::swap::{fleet, Swapper};
use crate::lease::components::ComponentStore;
use crate::lease::control::{self, ControlTable, FleetWatch};
use crate::lease::coordinator::{Coordinator, HeldLease, TakePass};
use crate::lease::dynamo::DynamoStore;
use crate::lease::{LeaseError, LeaseStore};
use crate::runtime::Processor;
use crate::shard::{self, InitialPosition};
use consumer::{Consumer, Outcome};
use crate::swap::rollout::{self, CallReport, Rollout};
use redelivery::Budget;
use upkeep::{beat, beat_every, check_unique, process_name, renew_every, sync_shards};

/// Longest a graceful stop waits for processors to shut down.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a graceful stop that is not done says what it waits for.
const STOP_TELL_AFTER: Duration = Duration::from_secs(2);

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Aws(#[from] AwsError),
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("{0}")]
    Refused(String),
}

impl WorkerError {
    /// The AWS call that failed, if that is what went wrong.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            WorkerError::Aws(e) | WorkerError::Lease(LeaseError::Aws(e)) => Some(e),
            WorkerError::Refused(_) => None,
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
    pub elapsed: Duration,
}

type Held = Arc<HeldLease<DynamoStore>>;

/// A running consumer as the worker sees it.
struct Running {
    held: Held,
    delivered: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    /// The processor this shard should run: a new value swaps it.
    processor: watch::Sender<Processor>,
    metrics: ShardMetrics,
}

/// The consumers of this worker, one per held lease.
struct Consumers {
    template: Template,
    rollout: Rollout,
    tasks: JoinSet<()>,
    running: BTreeMap<String, Running>,
    ended: mpsc::UnboundedSender<(Held, Outcome)>,
    reports: mpsc::UnboundedSender<CallReport>,
}

/// What every consumer is made from.
struct Template {
    kinesis: aws_sdk_kinesis::Client,
    stream: String,
    /// `--initial-timestamp`, for leases that start AT_TIMESTAMP.
    initial_timestamp_ms: Option<i64>,
    fetch: FetchSettings,
    fan_out: Option<KinesisSubscriptions>,
    metrics: Arc<Metrics>,
    redelivery: Arc<Budget>,
}

impl Consumers {
    fn spawn(&mut self, held: Held) {
        let (stop, stop_rx) = watch::channel(false);
        let metrics = self.template.metrics.shard(held.key());
        let (processor, processor_rx) = watch::channel(self.rollout.current().clone());
        let delivered = Arc::new(AtomicU64::new(0));
        let consumer = Consumer {
            processor: processor_rx,
            kinesis: self.template.kinesis.clone(),
            stream: self.template.stream.clone(),
            initial_timestamp_ms: self.template.initial_timestamp_ms,
            fetch: self.template.fetch.clone(),
            fan_out: self.template.fan_out.clone(),
            held: held.clone(),
            stop: stop_rx,
            delivered: delivered.clone(),
            metrics: metrics.clone(),
            reports: self.reports.clone(),
            redelivery: self.template.redelivery.clone(),
        };
        let key = held.key().to_owned();
        let ended = self.ended.clone();
        tracing::info!(shard = %key, processor = self.rollout.current().describe(), "processing");
        self.running.insert(key, Running { held: held.clone(), delivered, stop, processor, metrics });
        // In the worker's span: every line of the shard names the worker.
        self.tasks.spawn(
            async move {
                let outcome = consumer.run().await;
                let _ = ended.send((held, outcome));
            }
            .in_current_span(),
        );
    }

    /// Starts consumers for what a pass took and stops those of the leases
    /// it gives back; `true` when the pass was short of its share.
    fn apply(&mut self, pass: TakePass<DynamoStore>) -> bool {
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
        pass.short
    }

    /// A new processor was offered: roll it out.
    fn offer(&mut self, processor: Processor) {
        self.rollout.offer(processor, channels(&self.running));
    }

    /// A call ended: the rollout goes on, or back. Most calls are of a
    /// version not on trial, and cost nothing here.
    fn report(&mut self, report: &CallReport) -> bool {
        if !self.rollout.on_trial(&report.processor) {
            return false;
        }
        self.rollout.report(report, channels(&self.running));
        true
    }

    /// The canary ran its idle time: the rollout goes on.
    fn canary_idle(&mut self) {
        self.rollout.canary_idle(channels(&self.running));
    }

    /// Tells `swapper` where the rollout stands (what the heartbeat reports,
    /// and what a new offer is compared with).
    fn tell(&self, swapper: &Swapper) {
        swapper.record_rollout(self.rollout.current(), self.rollout.candidate());
    }

    /// Forgets the consumer of `held` (not a newer one of the same shard);
    /// returns the records it delivered.
    fn ended(&mut self, held: &Held) -> Option<u64> {
        let key = held.key();
        if self.running.get(key).is_some_and(|r| r.held.id() == held.id()) {
            let done = self.running.remove(key).expect("just checked");
            done.metrics.forget();
            return Some(done.delivered.load(Ordering::Relaxed));
        }
        None
    }
}

/// Each running shard, for the rollout.
fn channels(running: &BTreeMap<String, Running>) -> rollout::Shards<'_> {
    running
        .iter()
        .map(|(key, r)| (key.as_str(), rollout::Shard { processor: &r.processor, delivered: r.delivered.load(Ordering::Relaxed) }))
        .collect()
}

/// Consumes `config.stream` until `shutdown` resolves, with the processor
/// `swapper` holds. Each version it offers is rolled out: a canary shard
/// first, then every shard at its next batch boundary, rolled back if it
/// fails (see [`rollout`]).
pub async fn run(
    config: WorkerConfig,
    clients: AwsClients,
    swapper: Arc<Swapper>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Summary, WorkerError> {
    let started = Instant::now();
    // Check the stream before touching DynamoDB: a typo in --stream must not create a table.
    shard::list_shards(&clients.kinesis, &config.stream).await?;
    let failover = config.take.failover_time;
    let store = Arc::new(DynamoStore::new(clients.dynamodb.clone(), &config.application).with_renewal_timeout(failover));
    let control = ControlTable::new(clients.dynamodb.clone(), &config.application);
    let components = ComponentStore::new(clients.dynamodb.clone(), &config.application);
    tokio::try_join!(store.ensure_table(), control.ensure())?;
    let me = config.worker_id.clone();
    let mut coordinator = Coordinator::new(store.clone(), &me, config.take.clone());
    let read = control.read().await?;
    // Before any shard starts: a restarted or new worker runs what the fleet was told to.
    let deploys_tried = fleet::Tried::default();
    if let Some(deployed) = &read.deployed {
        fleet::start_with_deployed(deployed, &swapper, &components, &deploys_tried).await;
    }
    let process = process_name();
    check_unique(&control, &me, &read, failover).await?;
    // Others see this worker (and may give it leases) from its first beat on.
    beat(&control, &me, &process, &swapper, &coordinator.liveness(), true).await?;
    let mut fleet = FleetWatch::new(&me, failover);
    fleet.observe(&read.heartbeats, Instant::now());
    coordinator.set_fleet(fleet.fleet().clone());

    let fan_out = match config.retrieval {
        Retrieval::Polling => None,
        Retrieval::FanOut => {
            let consumer_arn = fanout::register_consumer(&clients.kinesis, &config.stream, &config.application).await?;
            tracing::info!(consumer = %consumer_arn, "reading with enhanced fan-out");
            Some(KinesisSubscriptions { client: clients.kinesis.clone(), consumer_arn, stream: config.stream.clone() })
        }
    };
    let metrics = Arc::new(Metrics::new(&config.stream, &me));
    let health = Arc::new(Health::new(coordinator.liveness(), failover));
    let admin = match config.admin_listen {
        Some(address) => {
            let listener = TcpListener::bind(address).await.map_err(|e| {
                WorkerError::Refused(format!("cannot listen on --admin-listen {address}: {e}; choose a free address and port"))
            })?;
            if !address.ip().is_loopback() {
                tracing::warn!("the admin listener is on {address}, not a loopback address: anyone who can reach it can read /metrics");
            }
            tracing::info!("admin listener on http://{address} (GET /metrics, GET /healthz, POST /swap)");
            Some(tokio::spawn(admin::serve(listener, metrics.clone(), health.clone(), swapper.clone()).in_current_span()))
        }
        None => None,
    };
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel();
    let (reports_tx, mut reports_rx) = mpsc::unbounded_channel();
    let mut processor = swapper.subscribe();
    let rollout = Rollout::new(processor.borrow_and_update().clone(), config.swap, metrics.clone());
    let shard_sync_interval = config.shard_sync_interval;
    let mut consumers = Consumers {
        template: Template {
            kinesis: clients.kinesis.clone(),
            stream: config.stream.clone(),
            initial_timestamp_ms: match config.initial_position {
                InitialPosition::AtTimestamp(ms) => Some(ms),
                _ => None,
            },
            fetch: config.fetch.clone(),
            redelivery: Budget::new(config.swap.buffer_bytes),
            fan_out,
            metrics: metrics.clone(),
        },
        rollout,
        tasks: JoinSet::new(),
        running: BTreeMap::new(),
        ended: ended_tx,
        reports: reports_tx,
    };
    let config = &config;
    let mut summary = Summary::default();

    sync_shards(config, &clients, &store, &store.list().await?).await?;
    let mut short = consumers.apply(coordinator.take_pass().await?);
    tracing::info!(leases = consumers.running.len(), "first lease pass done in {:?}", started.elapsed());

    // The heartbeat and the renewals in tasks of their own: no take pass,
    // shard sync or slow renewal delays them.
    let poll = control::poll_interval(failover);
    let (taken_over_tx, mut taken_over) = mpsc::channel(1);
    let beats = beat_every(control.clone(), me.clone(), process.clone(), swapper.clone(), coordinator.liveness(), failover / 3, poll);
    let heartbeats = tokio::spawn(
        async move {
            let _ = taken_over_tx.send(beats.await).await;
        }
        .in_current_span(),
    );
    let renewals = tokio::spawn(renew_every(coordinator.renewer(failover / 3), metrics.clone()).in_current_span());
    let mut next_poll = Instant::now() + poll;
    let mut last_pass = Instant::now();
    let mut sync = tokio::time::interval(shard_sync_interval);
    sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sync.reset();
    tokio::pin!(shutdown);
    let mut refused = None;
    // Loading and checking a deployed version takes seconds: off the loop.
    let mut following: Option<tokio::task::JoinHandle<()>> = None;

    loop {
        health.loop_ran();
        health.short_of_share(short);
        metrics.leases_held(consumers.running.len());
        metrics.swap_buffer(consumers.template.redelivery.used());
        // Java KCL's taker interval: the heartbeats already bring a pass at
        // once when a worker dies, stops or joins.
        let next_pass = last_pass + if short { poll } else { failover * 2 };
        let take_at = coordinator.expiry_due().map_or(next_pass, |due| due.min(next_pass));
        let poll_at = fleet.next_death().map_or(next_poll, |death| death.min(next_poll));
        let canary_due = consumers.rollout.canary_due();
        let mut pass_now = false;
        let mut after_end = None;
        tokio::select! {
            _ = &mut shutdown => break,
            Some(reason) = taken_over.recv() => {
                // Nothing more may be delivered or written as this worker.
                coordinator.liveness().revoke();
                tracing::error!("{reason}; stopping");
                refused = Some(reason);
                break;
            }
            _ = tokio::time::sleep_until(take_at) => pass_now = true,
            _ = tokio::time::sleep_until(poll_at) => {
                next_poll = Instant::now() + poll;
                // Bounded: a read hung in an outage must not hold the loop once DynamoDB is back.
                match tokio::time::timeout(failover / 2, control.read()).await {
                    Ok(Ok(read)) => {
                        // Liveness is judged on the clock of the read, never a later one.
                        let read_at = Instant::now();
                        if let Some(deployed) = read.deployed.filter(|_| following.as_ref().is_none_or(|task| task.is_finished())) {
                            let (swapper, components, tried) = (swapper.clone(), components.clone(), deploys_tried.clone());
                            let follow = async move { fleet::follow(&deployed, &swapper, &components, &tried).await };
                            following = Some(tokio::spawn(follow.in_current_span()));
                        }
                        if fleet.observe(&read.heartbeats, read_at) {
                            let now = fleet.fleet();
                            tracing::info!(live = ?now.live, dead = ?now.dead, "the fleet changed");
                            coordinator.set_fleet(now.clone());
                            pass_now = true;
                        }
                        for (worker, heartbeat) in fleet.forgettable(read_at) {
                            if let Err(e) = control.forget(&worker, heartbeat).await {
                                tracing::warn!(worker = %worker, "could not delete a dead worker's heartbeat row: {e}");
                            }
                        }
                    }
                    Ok(Err(e)) => tracing::warn!("could not read the fleet's heartbeats: {e}"),
                    Err(_) => tracing::warn!("reading the fleet's heartbeats took over {:?}; trying again at the next poll", failover / 2),
                }
            }
            Ok(()) = processor.changed() => {
                let offered = processor.borrow_and_update().clone();
                consumers.offer(offered);
                consumers.tell(&swapper);
            }
            Some(report) = reports_rx.recv() => {
                if consumers.report(&report) {
                    consumers.tell(&swapper);
                }
            }
            _ = tokio::time::sleep_until(canary_due.unwrap_or(take_at)), if canary_due.is_some() => {
                consumers.canary_idle();
                consumers.tell(&swapper);
            }
            _ = sync.tick() => {
                if let Err(e) = sync_shards(config, &clients, &store, coordinator.leases()).await {
                    tracing::warn!("shard sync failed: {e}");
                }
            }
            Some((held, outcome)) = ended_rx.recv() => {
                let key = held.key().to_owned();
                if let Some(delivered) = consumers.ended(&held) {
                    *summary.records.entry(key.clone()).or_default() += delivered;
                }
                match outcome {
                    Outcome::LeaseLost => {
                        coordinator.consumer_ended(&held);
                        // Lost to an outage rather than to another worker: take it back as soon as we may.
                        pass_now = true;
                    }
                    Outcome::Stopped => {
                        // Only a consumer given back to balance stops while the worker runs.
                        match coordinator.evict(&key).await {
                            Ok(()) => tracing::info!(shard = %key, "gave the lease back"),
                            Err(e) => tracing::warn!(shard = %key, "could not give the lease back (it will expire): {e}"),
                        }
                    }
                    Outcome::Refused(reason) => {
                        tracing::error!(shard = %key, "{reason}; stopping");
                        if let Err(e) = coordinator.evict(&key).await {
                            tracing::warn!(shard = %key, "could not release the lease (it will expire): {e}");
                        }
                        refused = Some(reason);
                        break;
                    }
                    Outcome::ShardEnd { .. } => {
                        // Before the pass that starts the children: they run what their parent ran.
                        consumers.rollout.shard_ended(&key, channels(&consumers.running));
                        consumers.tell(&swapper);
                        coordinator.finished(&key);
                        summary.finished.push(key.clone());
                        // Children become ready the moment a parent ends: sync and take now.
                        if let Err(e) = sync_shards(config, &clients, &store, coordinator.leases()).await {
                            tracing::warn!("shard sync failed: {e}");
                        }
                        pass_now = true;
                        after_end = Some(key);
                    }
                }
            }
        }
        if pass_now {
            match coordinator.take_pass().await {
                Ok(pass) => {
                    let taken = pass.taken.len();
                    short = consumers.apply(pass);
                    if let Some(shard) = after_end {
                        tracing::info!(shard = %shard, "lease pass after the shard ended took {taken} leases");
                    }
                }
                Err(e) => tracing::warn!("lease pass failed: {e}"),
            }
            last_pass = Instant::now();
        }
    }

    // Graceful stop: shutdown(requested) everywhere, then give the leases back.
    tracing::info!(shards = consumers.running.len(), "stopping: shutting down processors");
    for running in consumers.running.values() {
        running.stop.send_replace(true);
    }
    let tasks = &mut consumers.tasks;
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
        tasks.abort_all();
    }
    // Processors are done: stop renewing, then give the leases back.
    renewals.abort();
    heartbeats.abort();
    while let Ok((held, outcome)) = ended_rx.try_recv() {
        if let Outcome::ShardEnd { .. } = outcome {
            coordinator.finished(held.key());
            summary.finished.push(held.key().to_owned());
        }
    }
    for (key, done) in std::mem::take(&mut consumers.running) {
        *summary.records.entry(key.clone()).or_default() += done.delivered.load(Ordering::Relaxed);
        if done.held.is_valid()
            && let Err(e) = coordinator.evict(&key).await
        {
            tracing::warn!(shard = %key, "could not release the lease (it will expire): {e}");
        }
    }
    if let Some(admin) = admin {
        admin.abort();
    }
    // The others notice at their next heartbeat read and take the leases.
    if let Err(e) = control.leave(&me, &process).await {
        tracing::warn!("could not delete this worker's heartbeat row (the others see it die instead): {e}");
    }
    summary.elapsed = started.elapsed();
    summary.versions = consumers.rollout.history().to_vec();
    match refused {
        Some(reason) => Err(WorkerError::Refused(reason)),
        None => Ok(summary),
    }
}
