//! Applies the lease rules through a [`LeaseStore`]: take passes,
//! eviction, and the leases this worker holds ([`HeldLease`], renewed by a
//! [`Renewer`]).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;
// tokio's clock: the lease simulation runs it paused, as a virtual clock.
use tokio::time::Instant;

pub use super::held::HeldLease;
pub use super::held::{CheckpointFailure, Liveness};
use super::renewer::{lock, HeldMap};
pub use super::renewer::{LeaseCover, Renewer};
use super::heartbeat::Heartbeat;
use super::rules::{self, ExpiryTracker, Fleet, TakeSettings, View};
use super::watch::{poll_interval, FleetChange, FleetWatch};
use super::{Lease, LeaseError, LeaseKey, LeaseStore};

mod swaps;
mod take;
pub use take::TakePass;

/// Take passes come every this many failover times while the table is
/// [`Coordinator::settled`]: a lease scan reads the whole table, and at
/// 10,000 leases scans every two failover times were most of the DynamoDB
/// bill. A safety net only: what changes a settled table is announced in
/// the heartbeats.
pub const SETTLED_PASS_EVERY: u32 = 12;

/// Takes, renews and releases this worker's leases.
pub struct Coordinator<S> {
    store: Arc<S>,
    worker_id: String,
    settings: TakeSettings,
    tracker: ExpiryTracker,
    held: HeldMap<S>,
    /// Held leases being given back to balance the fleet.
    releasing: HashSet<LeaseKey>,
    /// Leases given back to spread the streams.
    swaps: swaps::Swaps,
    fleet: Fleet,
    /// When the heartbeat read that showed `fleet` was sent.
    fleet_read_sent: Option<Instant>,
    /// Live Java KCL 3.x workers, as the last pass read their metrics rows.
    kcl3_workers: BTreeSet<String>,
    /// Java KCL 3.x workers that released their last lease (stopped).
    kcl3_leavers: rules::Kcl3Leavers,
    /// Whether the last pass found Java KCL 3.x rows in the table.
    kcl3_in_table: bool,
    liveness: Arc<Liveness>,
    /// The leases as the last pass read them, for the shard sync.
    leases: Vec<Lease>,
    /// The earliest moment a lease the last pass saw could expire.
    next_expiry: Option<Instant>,
    rng: fastrand::Rng,
    next_id: u64,
    /// Children already logged as waiting on an unreadable parent row.
    waiting_logged: HashSet<LeaseKey>,
    /// The next pass covers a worker that died or stopped.
    cover: bool,
    /// Whether the last pass found the table [`Self::settled`].
    was_settled: bool,
    /// The leases this worker may take (those of its streams); every row when `None`.
    scope: Option<Scope>,
}

/// Which lease keys a worker may take: those of the streams it reads.
pub type Scope = Box<dyn Fn(&LeaseKey) -> bool + Send + Sync>;

impl<S: LeaseStore> Coordinator<S> {
    /// A coordinator taking leases from `store` as `worker_id`.
    pub fn new(store: Arc<S>, worker_id: impl Into<String>, settings: TakeSettings) -> Self {
        Self {
            store,
            worker_id: worker_id.into(),
            settings: settings.clone(),
            tracker: ExpiryTracker::default(),
            held: HeldMap::default(),
            releasing: HashSet::new(),
            swaps: swaps::Swaps::default(),
            fleet: Fleet::default(),
            fleet_read_sent: None,
            kcl3_workers: BTreeSet::new(),
            kcl3_leavers: rules::Kcl3Leavers::default(),
            kcl3_in_table: false,
            liveness: Arc::new(Liveness::new(settings.failover_time)),
            leases: Vec::new(),
            next_expiry: None,
            rng: fastrand::Rng::new(),
            next_id: 0,
            waiting_logged: HashSet::new(),
            cover: false,
            was_settled: false,
            scope: None,
        }
    }

    /// Takes only the leases `scope` accepts; of the others, only those a
    /// live worker holds count (toward the shares), and only in the census.
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = Some(scope);
        self
    }

    /// Makes the next pass take every free or expired lease, whatever the
    /// target ([`rules::View::cover`]): this worker is a watcher that saw a
    /// worker die or stop. It gives nothing back in that pass; a later one
    /// gives the excess to the workers below the target.
    pub fn cover_departures(&mut self) {
        self.cover = true;
    }

    /// Notes a fresh heartbeat read in `watch` — sent at `sent`, its answer
    /// in at `now` — and takes what this coordinator needs of it: the
    /// fleet, when it was read, and whether its next pass covers a worker
    /// that died or stopped ([`FleetWatch::covers_departures`]).
    pub fn follow_fleet(&mut self, watch: &mut FleetWatch, heartbeats: &[Heartbeat], sent: Instant, now: Instant) -> FleetChange {
        let change = watch.observe(heartbeats, now);
        self.fleet_read_sent = Some(sent);
        self.swaps.read_streams(heartbeats);
        if change.is_change() {
            self.set_fleet(watch.fleet().clone());
        }
        if change == FleetChange::Departed && watch.covers_departures() {
            tracing::info!(
                "a worker died or stopped: as a watcher, taking every lease it left now (the others read the fleet every {:?})",
                watch.others_read_every()
            );
            self.cover_departures();
        }
        change
    }

    fn view<'a>(&'a self, held: &'a HashSet<LeaseKey>, now: Instant) -> View<'a> {
        View {
            me: &self.worker_id,
            held,
            releasing: &self.releasing,
            fleet: &self.fleet,
            kcl3_workers: &self.kcl3_workers,
            tracker: &self.tracker,
            now,
            cover: false,
            fleet_read_sent: self.fleet_read_sent,
            scope: self.scope.as_deref(),
        }
    }

    /// The keys of the held leases. A lease on its way back that was lost
    /// meanwhile (its consumer ended, or a renewal found it taken) is no
    /// longer on its way back: the rules may take that shard again.
    fn held_keys(&mut self) -> HashSet<LeaseKey> {
        let held: HashSet<LeaseKey> = lock(&self.held).keys().cloned().collect();
        self.releasing.retain(|key| held.contains(key));
        held
    }

    /// Picks the held leases to give back, and marks them as on their way:
    /// the excess over the target, or else one to spread the streams.
    fn plan_release(&mut self, leases: &[Lease]) -> Vec<LeaseKey> {
        let held = self.held_keys();
        let now = Instant::now();
        let mut release = rules::plan_release(leases, &self.view(&held, now), &self.settings);
        if release.is_empty() && self.swaps.may_try() {
            let reads = |worker: &str, stream: &str| self.swaps.reads(worker, stream);
            let swap = rules::plan_swap(leases, &self.view(&held, now), &self.settings, &reads);
            if let Some(key) = swap {
                tracing::info!(shard = %key, "giving a lease back to spread the streams over the workers");
                self.swaps.give(key.clone(), now);
                release.push(key);
            }
        }
        self.releasing.extend(release.iter().cloned());
        release
    }

    /// When the first lease of an owner without a heartbeat could expire,
    /// if its counter stays as read.
    fn next_expiry(&self, leases: &[Lease]) -> Option<Instant> {
        leases
            .iter()
            .filter(|l| l.owner.as_deref().is_some_and(|o| o != self.worker_id && !self.fleet.live.contains(o)))
            .filter_map(|l| self.tracker.stale_at(&l.key, l.counter, self.settings.failover_time))
            .filter(|at| *at > Instant::now())
            .min()
    }

    /// Whether the last pass found every lease finished or held by a live
    /// kcl-host worker: then nothing can come up to take that the fleet's
    /// heartbeats would not announce (a worker that dies, stops or joins, or
    /// leaves leases to take), and take passes may be rare.
    pub fn settled(&self) -> bool {
        let held_by_live = |owner: &str| owner == self.worker_id || self.fleet.live.contains(owner);
        let in_scope = |l: &&Lease| self.scope.as_ref().is_none_or(|scope| scope(&l.key));
        self.leases.iter().filter(in_scope).all(|l| l.is_finished() || l.owner.as_deref().is_some_and(held_by_live))
    }

    /// Whether the last pass found a lease held by a worker with no live
    /// heartbeat (Java KCL, or a kcl-host worker judged dead): it expires
    /// when its owner stops renewing, which only a lease scan shows.
    fn held_without_heartbeat(&self) -> bool {
        let in_scope = |l: &&Lease| self.scope.as_ref().is_none_or(|scope| scope(&l.key));
        let unannounced = |owner: &str| owner != self.worker_id && !self.fleet.live.contains(owner);
        self.leases.iter().filter(in_scope).any(|l| !l.is_finished() && l.owner.as_deref().is_some_and(unannounced))
    }

    /// Says when the table became [`Self::settled`] or stopped being so:
    /// how often this worker scans it changes then.
    fn note_settled(&mut self) {
        let settled = self.settled();
        if settled == self.was_settled {
            return;
        }
        self.was_settled = settled;
        let failover = self.settings.failover_time;
        if settled {
            tracing::info!("every lease is held by a live kcl-host worker: scanning the lease table every {:?}, and at once when the heartbeats show a change", failover * SETTLED_PASS_EVERY);
        } else {
            tracing::info!(
                "a lease is free or held by a worker without a heartbeat: scanning the lease table every {:?} (every {:?} while such a worker holds one, every {:?} while the table has Java KCL 3.x rows)",
                failover * 2,
                failover / 4,
                failover
            );
        }
    }

    /// The time from one take pass to the next, unless the heartbeats bring
    /// one sooner (a worker that died, stopped, joined or freed leases): a
    /// read interval while the last pass left this worker `short` of its
    /// share; the others' read interval while `above` it (the excess goes
    /// back once they know); a quarter of the failover time while a lease is
    /// held by a worker without a heartbeat (a Java worker that stops leaves
    /// its leases owned: taken within the failover time and a quarter of it
    /// after its last renewal); the failover time while the table has Java
    /// KCL 3.x rows (a 3.x worker that joins shows only in a scan);
    /// [`SETTLED_PASS_EVERY`] failover times while [`Self::settled`]; else
    /// two failover times (Java KCL's taker interval).
    pub fn pass_interval(&self, short: bool, above: bool, watch: &FleetWatch) -> Duration {
        let failover = self.settings.failover_time;
        if short {
            poll_interval(failover)
        } else if above {
            watch.others_read_every()
        } else if self.held_without_heartbeat() {
            (failover / 4).max(poll_interval(failover))
        } else if self.kcl3_in_table {
            failover
        } else if self.settled() {
            failover * SETTLED_PASS_EVERY
        } else {
            failover * 2
        }
    }

    /// How often to look for a Java KCL 3.x worker joining
    /// ([`super::dynamo::DynamoStore::has_kcl3_leader`]) while the last pass
    /// found no 3.x rows: half the failover time, and only under
    /// `--lease-renewal per-lease`, the one mode Java KCL shares a table in.
    /// A settled table is scanned every [`SETTLED_PASS_EVERY`] failover
    /// times, and a 3.x worker holds nothing until kcl-host gives it room.
    pub fn kcl3_probe_interval(&self) -> Option<Duration> {
        (!self.settings.heartbeat_leases && !self.kcl3_in_table).then_some(self.settings.failover_time / 2)
    }

    /// The earliest moment a lease the last pass saw could expire: a take
    /// pass then finds it expired, rather than up to a whole period later.
    pub fn expiry_due(&self) -> Option<Instant> {
        self.next_expiry
    }

    /// The leases as the last take pass read them (eventually consistent,
    /// so possibly a little stale: good enough for the conditional writes of
    /// a shard sync).
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// The fleet as the heartbeat rows show it now.
    pub fn set_fleet(&mut self, fleet: Fleet) {
        self.fleet = fleet;
        self.swaps.fleet_changed();
    }

    /// This worker's heartbeat clock, for the task that writes the heartbeat.
    pub fn liveness(&self) -> Arc<Liveness> {
        self.liveness.clone()
    }

    /// The renewer of this coordinator's leases, to run in its own task
    /// every `every`.
    pub fn renewer(&self, every: Duration) -> Renewer<S> {
        Renewer { held: self.held.clone(), liveness: self.liveness.clone(), every, failed: Default::default() }
    }

    /// What the heartbeat task tells of each beat written: it renews the
    /// leases in heartbeat mode.
    pub fn cover(&self) -> LeaseCover<S> {
        LeaseCover { held: self.held.clone(), liveness: self.liveness.clone() }
    }

    /// Renews every held lease; returns (and forgets) the ones lost.
    pub async fn renew_all(&mut self) -> Vec<Arc<HeldLease<S>>> {
        self.renewer(Duration::ZERO).renew_all().await
    }

    /// Stops tracking a lease whose shard was processed to its end.
    pub fn finished(&mut self, key: &str) {
        lock(&self.held).remove(key);
    }

    /// The consumer of `held` ended without finishing the shard (its
    /// validity ran out before a renewal noticed, say). A lease is never
    /// held without a consumer: this take is forgotten, so the next pass
    /// takes the row again (if nobody else did) and starts a new consumer.
    /// A newer take of the same shard is left alone.
    pub fn consumer_ended(&mut self, held: &Arc<HeldLease<S>>) {
        let mut current = lock(&self.held);
        if current.get(held.key()).is_some_and(|current| Arc::ptr_eq(current, held)) {
            held.mark_lost();
            current.remove(held.key());
        }
    }

    /// Gives one lease back (owner cleared) so other workers take it in
    /// their next pass: `false` when it was not held, or another worker had
    /// taken it already (the write is conditional on the counter).
    pub async fn evict(&mut self, key: &str) -> Result<bool, LeaseError> {
        self.releasing.remove(key);
        let removed = lock(&self.held).remove(key);
        let Some(held) = removed else { return Ok(false) };
        held.mark_lost();
        let lease = held.lease.lock().await;
        self.store.evict(&lease).await
    }
}

#[cfg(test)]
mod tests;
