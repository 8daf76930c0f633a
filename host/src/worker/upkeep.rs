//! The worker's upkeep, beside its main loop: the heartbeat (and the
//! worker id it claims), lease renewals, and shard syncs.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::in_flight::InFlightBoard;
use super::WorkerError;
use crate::aws::{AwsClients, AwsError, Service};
use crate::lease::heartbeat::{ControlRead, HeartbeatTable, LeaseNews, Report};
use crate::lease::watch;
use crate::failure::retrying::RetryBoard;
use crate::lease::coordinator::{HeldLease, LeaseCover, Renewer};
use crate::lease::dynamo::DynamoStore;
use crate::lease::{Lease, LeaseError, LeaseKey, LeaseStore};
use crate::metrics::Metrics;
use crate::shard;
use crate::stream::Streams;
use crate::swap::Swapper;

/// What this worker's heartbeat row says, and who writes it.
#[derive(Clone)]
pub(super) struct Beat {
    pub(super) control: HeartbeatTable,
    pub(super) me: String,
    /// The process that writes the row.
    pub(super) process: String,
    /// The processor it runs.
    pub(super) swapper: Arc<Swapper>,
    /// Told of each write that succeeded: the leases' validity (and, in
    /// heartbeat mode, their renewal).
    pub(super) cover: LeaseCover<DynamoStore>,
    /// Its shards retrying failed records.
    pub(super) retrying: Arc<RetryBoard>,
    /// Its shards run by several instances.
    pub(super) in_flight: Arc<InFlightBoard>,
    /// Leases it left for the others, written at once.
    pub(super) news: Arc<LeaseNews>,
    /// The streams it reads, when there are several
    /// ([`crate::lease::heartbeat::streams_report`]); empty for one.
    pub(super) streams: Report,
}

impl Beat {
    /// Writes the heartbeat, taking the row over when `claim`; on success
    /// the leases stay valid one failover time from when the write was
    /// sent. `Ok(false)` when another process writes the row now.
    pub(super) async fn once(&self, claim: bool) -> Result<bool, LeaseError> {
        let sent = Instant::now();
        let mut report = self.swapper.current().report();
        report.extend(self.retrying.report());
        report.extend(self.in_flight.report());
        report.push(self.news.report());
        report.extend(self.streams.iter().cloned());
        let counter = self.control.beat(&self.me, &self.process, claim, &report).await?;
        if let Some(counter) = counter {
            self.cover.heartbeat_written(sent, counter);
        }
        Ok(counter.is_some())
    }

    /// Writes the heartbeat every `period` — and `retry` after a write that
    /// failed, so the leases are valid again soon after DynamoDB is back;
    /// at once when there is [`LeaseNews`] — until aborted. No renewal ever
    /// delays it, and no write takes longer than a period. Ends, saying
    /// why, if another process takes the worker id over.
    pub(super) async fn every(self, period: Duration, retry: Duration) -> String {
        let mut next = Instant::now() + period;
        loop {
            // News goes out at once, and the beats due keep their times.
            let due = tokio::select! {
                () = tokio::time::sleep_until(next) => next + period,
                () = self.news.written.notified() => next,
            };
            // At most a period each: a write hung in an outage must not hold the
            // next one back once DynamoDB answers again.
            let written = tokio::time::timeout(period, self.once(false)).await;
            next = match written.unwrap_or_else(|_| Err(LeaseError::Aws(AwsError::Unreachable {
                service: Service::DynamoDb,
                operation: "UpdateItem (heartbeat)",
                message: format!("no answer within {period:?}"),
            }))) {
                Ok(true) => due,
                Ok(false) => {
                    return format!(
                        "another process took over worker id `{}` (its heartbeat row is no longer this one's): \
                         give each process its own --worker-id",
                        self.me
                    );
                }
                Err(e) => {
                    tracing::warn!("could not write the heartbeat (the leases stop being valid if this goes on): {e}");
                    Instant::now() + retry
                }
            };
        }
    }
}

/// This process, as its heartbeat row names it: host, pid and a nonce.
pub(super) fn process_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "unknown host".into());
    format!("{host} pid {} #{:08x}", std::process::id(), fastrand::u32(..))
}

/// Refuses to start while another live process beats as `me`. A row of
/// this worker id written lately may be a crashed process's: it is watched
/// for one heartbeat period, and only one that moves meanwhile refuses.
pub(super) async fn check_unique(control: &HeartbeatTable, me: &str, read: &ControlRead, failover: Duration) -> Result<(), WorkerError> {
    let Some(row) = read.heartbeats.iter().find(|h| h.worker == me) else { return Ok(()) };
    let now_ms = crate::clock::unix_ms();
    // Twice the failover time: room for clocks that disagree.
    if row.beat_ms.is_some_and(|ms| now_ms.saturating_sub(ms) > 2 * failover.as_millis() as u64) {
        return Ok(());
    }
    tracing::info!("worker id `{me}` has a recent heartbeat row: watching it for one heartbeat period before starting");
    tokio::time::sleep(failover / 3 + watch::poll_interval(failover)).await;
    let again = control.read().await?;
    match again.heartbeats.iter().find(|h| h.worker == me) {
        Some(now) if now.heartbeat != row.heartbeat => Err(WorkerError::Refused(format!(
            "worker id `{me}` is in use by a live process ({}): its heartbeat moved while this one watched; \
             give each process its own --worker-id (as Java KCL requires), or stop that process first",
            now.process.as_deref().unwrap_or("an older kcl-host")
        ))),
        _ => Ok(()),
    }
}

/// Renews the held leases every renewal period, until aborted.
pub(super) async fn renew_every<S: LeaseStore>(renewer: Renewer<S>, metrics: Arc<Metrics>) {
    let on_lost = |held: &HeldLease<S>| {
        metrics.lease_lost();
        tracing::warn!(shard = %held.key(), "lease lost; stopping delivery");
    };
    renewer.run(|| metrics.renewal_failed(), on_lost).await;
}

/// Lists each stream's shards, creates the leases that are missing, and
/// deletes finished leases whose children have all started. `true` when it
/// created a lease.
pub(super) async fn sync_shards<S: LeaseStore>(
    streams: &Streams,
    clients: &AwsClients,
    store: &Arc<S>,
    leases: &[Lease],
) -> Result<bool, WorkerError> {
    let mut planned = Vec::new();
    for stream in streams.iter() {
        let shards = crate::source::list_shards(clients, stream).await?;
        let of_stream: Vec<&Lease> = leases.iter().filter(|lease| streams.of(&lease.key) == Some(stream)).collect();
        planned.extend(shard::plan_new_leases(&shards, &of_stream, &stream.initial_position, |id| streams.key(stream, id)));
    }
    // Leases whose parents are not new are written all at once; a new
    // child only after its new parents, so no child is ever without them.
    let new_keys: HashSet<LeaseKey> = planned.iter().map(|l| l.key.clone()).collect();
    let (independent, dependent): (Vec<_>, Vec<_>) = planned.into_iter().partition(|l| l.parents.iter().all(|p| !new_keys.contains(p.as_str())));
    let mut creates = JoinSet::new();
    for lease in independent {
        let store = store.clone();
        creates.spawn(async move { store.create(&lease).await.map(|created| (created, lease)) });
    }
    let mut any = false;
    while let Some(created) = creates.join_next().await {
        any |= log_created(created.expect("a create does not panic")?);
    }
    for lease in dependent {
        any |= log_created((store.create(&lease).await?, lease));
    }
    for key in shard::plan_cleanup(leases) {
        if store.delete_finished(&key).await? {
            tracing::info!(shard = %key, "deleted the finished lease: every child has started");
        }
    }
    Ok(any)
}

/// Logs a lease this worker created (not one another worker had already); returns whether it did.
fn log_created((created, lease): (bool, Lease)) -> bool {
    if created {
        tracing::info!(shard = %lease.key, checkpoint = %lease.checkpoint, parents = ?lease.parents, "created lease");
    }
    created
}

/// Whether a Java KCL 3.x worker has joined a table that had no 3.x rows
/// (its leader row is there): then a take pass is due, to count it and
/// give it room.
pub(super) async fn kcl3_joined(store: &DynamoStore) -> bool {
    match store.has_kcl3_leader().await {
        Ok(true) => {
            tracing::info!("Java KCL 3.x's leader row is in the lease table: reading the table now");
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::warn!("could not look for Java KCL 3.x's leader row: {e}");
            false
        }
    }
}
