//! The worker: the one place that ties leases, shards, fetching and the
//! component runtime together.
//!
//! At start it syncs shards to leases and takes every lease it should at
//! once. Then it renews its leases every third of the failover time, takes
//! leases every failover time, syncs shards every sync interval, and — as
//! soon as a shard reaches its end — syncs and takes again, so children
//! start right after their parents.

mod consumer;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::aws::{AwsClients, AwsError};
use crate::config::WorkerConfig;
use crate::lease::coordinator::{Coordinator, HeldLease, Renewer};
use crate::lease::dynamo::DynamoStore;
use crate::lease::{Lease, LeaseError, LeaseStore};
use crate::runtime::Processor;
use crate::shard::{self, InitialPosition};
use consumer::{Consumer, Outcome};

/// Longest a graceful stop waits for processors to shut down.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

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

/// What a worker did, for the summary printed at exit.
#[derive(Debug, Default)]
pub struct Summary {
    /// Records processed per shard.
    pub records: BTreeMap<String, u64>,
    /// Shards this worker processed to their end.
    pub finished: Vec<String>,
    pub elapsed: Duration,
}

/// A running consumer as the worker sees it.
struct Running {
    held: Arc<HeldLease<DynamoStore>>,
    delivered: Arc<AtomicU64>,
}

/// Consumes `config.stream` with `processor` until `shutdown` resolves.
pub async fn run(
    config: WorkerConfig,
    clients: AwsClients,
    processor: Processor,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Summary, WorkerError> {
    let started = Instant::now();
    // Check the stream before touching DynamoDB: a typo in --stream must not create a table.
    shard::list_shards(&clients.kinesis, &config.stream).await?;
    let store = Arc::new(DynamoStore::new(clients.dynamodb.clone(), &config.application));
    store.ensure_table().await?;
    let mut coordinator = Coordinator::new(store.clone(), &config.worker_id, config.take.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel::<(Arc<HeldLease<DynamoStore>>, Outcome)>();
    let mut consumers: JoinSet<()> = JoinSet::new();
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut summary = Summary::default();

    let spawn = |held: Arc<HeldLease<DynamoStore>>, consumers: &mut JoinSet<()>, running: &mut BTreeMap<String, Running>| {
        let delivered = Arc::new(AtomicU64::new(0));
        let consumer = Consumer {
            processor: processor.clone(),
            kinesis: clients.kinesis.clone(),
            stream: config.stream.clone(),
            initial_timestamp_ms: match config.initial_position {
                InitialPosition::AtTimestamp(ms) => Some(ms),
                _ => None,
            },
            fetch: config.fetch.clone(),
            held: held.clone(),
            stop: stop_rx.clone(),
            delivered: delivered.clone(),
        };
        let key = held.key().to_owned();
        let ended = ended_tx.clone();
        tracing::info!(shard = %key, "processing");
        running.insert(key, Running { held: held.clone(), delivered });
        consumers.spawn(async move {
            let outcome = consumer.run().await;
            let _ = ended.send((held, outcome));
        });
    };

    sync_shards(&config, &clients, &store).await?;
    for held in coordinator.take_pass().await? {
        spawn(held, &mut consumers, &mut running);
    }
    tracing::info!(leases = running.len(), "first lease pass done in {:?}", started.elapsed());

    // Renewals in a task of their own: no take pass or shard sync delays them.
    let renewals = tokio::spawn(renew_every(coordinator.renewer(), config.take.failover_time / 3));
    let mut take = tokio::time::interval(config.take.failover_time);
    let mut sync = tokio::time::interval(config.shard_sync_interval);
    for timer in [&mut take, &mut sync] {
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        timer.reset();
    }
    tokio::pin!(shutdown);
    let mut refused = None;

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = take.tick() => {
                take_and_spawn(&mut coordinator, |h| spawn(h, &mut consumers, &mut running)).await;
            }
            _ = sync.tick() => {
                if let Err(e) = sync_shards(&config, &clients, &store).await {
                    tracing::warn!("shard sync failed: {e}");
                }
            }
            Some((held, outcome)) = ended_rx.recv() => {
                let key = held.key().to_owned();
                // Only this take's entry: a newer take of the shard has its own consumer.
                if running.get(&key).is_some_and(|r| r.held.id() == held.id()) {
                    let done = running.remove(&key).expect("just checked");
                    *summary.records.entry(key.clone()).or_default() += done.delivered.load(Ordering::Relaxed);
                }
                if outcome == Outcome::LeaseLost {
                    coordinator.consumer_ended(&held);
                }
                if let Outcome::Refused(reason) = outcome {
                    tracing::error!(shard = %key, "{reason}; stopping");
                    if let Err(e) = coordinator.evict(&key).await {
                        tracing::warn!(shard = %key, "could not release the lease (it will expire): {e}");
                    }
                    refused = Some(reason);
                    break;
                }
                if let Outcome::ShardEnd { .. } = outcome {
                    coordinator.finished(&key);
                    summary.finished.push(key.clone());
                    // Children become ready the moment a parent ends: sync and take now.
                    if let Err(e) = sync_shards(&config, &clients, &store).await {
                        tracing::warn!("shard sync failed: {e}");
                    }
                    let taken = take_and_spawn(&mut coordinator, |h| spawn(h, &mut consumers, &mut running)).await;
                    tracing::info!(shard = %key, "lease pass after the shard ended took {taken} leases");
                }
            }
        }
    }

    // Graceful stop: shutdown(requested) everywhere, then give the leases back.
    tracing::info!(shards = running.len(), "stopping: shutting down processors");
    stop_tx.send_replace(true);
    if tokio::time::timeout(STOP_TIMEOUT, async { while consumers.join_next().await.is_some() {} }).await.is_err() {
        tracing::warn!("processors did not stop within {STOP_TIMEOUT:?}; their leases expire instead");
        consumers.abort_all();
    }
    // Processors are done: stop renewing, then give the leases back.
    renewals.abort();
    while let Ok((held, outcome)) = ended_rx.try_recv() {
        if let Outcome::ShardEnd { .. } = outcome {
            coordinator.finished(held.key());
            summary.finished.push(held.key().to_owned());
        }
    }
    for (key, done) in running {
        *summary.records.entry(key.clone()).or_default() += done.delivered.load(Ordering::Relaxed);
        if done.held.is_valid() {
            if let Err(e) = coordinator.evict(&key).await {
                tracing::warn!(shard = %key, "could not release the lease (it will expire): {e}");
            }
        }
    }
    summary.elapsed = started.elapsed();
    match refused {
        Some(reason) => Err(WorkerError::Refused(reason)),
        None => Ok(summary),
    }
}

/// Renews the held leases every `period`, until aborted.
async fn renew_every<S: LeaseStore>(renewer: Renewer<S>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.reset();
    loop {
        tick.tick().await;
        for held in renewer.renew_all().await {
            tracing::warn!(shard = %held.key(), "lease lost; stopping delivery");
        }
    }
}

/// A take pass whose new leases go to `spawn`; returns how many were taken.
async fn take_and_spawn<S: LeaseStore>(coordinator: &mut Coordinator<S>, mut spawn: impl FnMut(Arc<HeldLease<S>>)) -> usize {
    match coordinator.take_pass().await {
        Ok(taken) => {
            let count = taken.len();
            taken.into_iter().for_each(&mut spawn);
            count
        }
        Err(e) => {
            tracing::warn!("lease pass failed: {e}");
            0
        }
    }
}

/// Lists the stream's shards, creates the leases that are missing, and
/// deletes finished leases whose children have all started.
async fn sync_shards<S: LeaseStore>(config: &WorkerConfig, clients: &AwsClients, store: &Arc<S>) -> Result<(), WorkerError> {
    let shards = shard::list_shards(&clients.kinesis, &config.stream).await?;
    let leases = store.list().await?;
    // Leases whose parents are not new are written all at once; a new
    // child only after its new parents, so no child is ever without them.
    let planned = shard::plan_new_leases(&shards, &leases, &config.initial_position);
    let new_keys: HashSet<String> = planned.iter().map(|l| l.key.clone()).collect();
    let (independent, dependent): (Vec<_>, Vec<_>) = planned.into_iter().partition(|l| l.parents.iter().all(|p| !new_keys.contains(p)));
    let mut creates = JoinSet::new();
    for lease in independent {
        let store = store.clone();
        creates.spawn(async move { store.create(&lease).await.map(|created| (created, lease)) });
    }
    while let Some(created) = creates.join_next().await {
        log_created(created.expect("a create does not panic")?);
    }
    for lease in dependent {
        log_created((store.create(&lease).await?, lease));
    }
    for key in shard::plan_cleanup(&leases) {
        if store.delete_finished(&key).await? {
            tracing::info!(shard = %key, "deleted the finished lease: every child has started");
        }
    }
    Ok(())
}

fn log_created((created, lease): (bool, Lease)) {
    if created {
        tracing::info!(shard = %lease.key, checkpoint = %lease.checkpoint, parents = ?lease.parents, "created lease");
    }
}
