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
use super::rules::{self, ExpiryTracker, Fleet, TakeSettings, View};
use super::{Lease, LeaseError, LeaseScan, LeaseStore};

/// Takes, renews and releases this worker's leases.
pub struct Coordinator<S> {
    store: Arc<S>,
    worker_id: String,
    settings: TakeSettings,
    tracker: ExpiryTracker,
    held: HeldMap<S>,
    /// Held leases being given back to balance the fleet.
    releasing: HashSet<String>,
    fleet: Fleet,
    /// Live Java KCL 3.x workers, as the last pass read their metrics rows.
    kcl3_workers: BTreeSet<String>,
    liveness: Arc<Liveness>,
    /// The leases as the last pass read them, for the shard sync.
    leases: Vec<Lease>,
    /// The earliest moment a lease the last pass saw could expire.
    next_expiry: Option<Instant>,
    rng: fastrand::Rng,
    next_id: u64,
    /// Children already logged as waiting on an unreadable parent row.
    waiting_logged: HashSet<String>,
    /// The next pass covers a worker that died or stopped.
    cover: bool,
}

/// What one take pass decided.
pub struct TakePass<S> {
    /// Leases newly taken; the caller starts a consumer for each.
    pub taken: Vec<Arc<HeldLease<S>>>,
    /// Held leases to give back to balance the fleet: the caller stops their
    /// consumers (`shutdown(requested)`, so they checkpoint) and then calls
    /// [`Coordinator::evict`].
    pub release: Vec<String>,
    /// Short of the target while another worker is above it, or taking
    /// nothing while this worker's heartbeat is overdue: pass again soon.
    pub short: bool,
    /// Above the target (after covering a departure, say): pass again once
    /// the others have read the fleet, to give the excess back to them.
    pub above: bool,
}

/// How many times one pass re-reads the table after losing a race for a lease.
const TAKE_ROUNDS: usize = 3;

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
            fleet: Fleet::default(),
            kcl3_workers: BTreeSet::new(),
            liveness: Arc::new(Liveness::new(settings.failover_time)),
            leases: Vec::new(),
            next_expiry: None,
            rng: fastrand::Rng::new(),
            next_id: 0,
            waiting_logged: HashSet::new(),
            cover: false,
        }
    }

    /// Makes the next pass take every free or expired lease, whatever the
    /// target ([`rules::View::cover`]): this worker is a watcher that saw a
    /// worker die or stop. It gives nothing back in that pass; a later one
    /// gives the excess to the workers below the target.
    pub fn cover_departures(&mut self) {
        self.cover = true;
    }

    /// One take pass: reads the table and takes every lease the rules give
    /// this worker, re-reading when another worker won a race, then decides
    /// what to give back to balance the fleet. A take that fails is logged
    /// and left for the next pass; only a failed read of the table (before
    /// anything was taken) is an error.
    pub async fn take_pass(&mut self) -> Result<TakePass<S>, LeaseError> {
        let mut taken = Vec::new();
        if !self.liveness.is_valid(Instant::now()) {
            tracing::warn!("taking no leases: this worker's heartbeat is overdue, so the others would take them; trying again soon");
            return Ok(TakePass { taken, release: Vec::new(), short: true, above: false });
        }
        let cover = std::mem::take(&mut self.cover);
        for _ in 0..TAKE_ROUNDS {
            let scan = self.store.scan().await?;
            let now = Instant::now();
            self.tracker.observe_leases(&scan.leases, now);
            self.choose_renewal(&scan);
            self.count_kcl3_workers(&scan);
            self.drop_taken_over(&scan.leases);
            self.leases = scan.leases.clone();
            let leases = self.without_unreadable_parents(scan);
            let held = self.held_keys();
            let mut rng = self.rng.fork();
            let plan = rules::plan_take(&leases, &View { cover, ..self.view(&held, now) }, &self.settings, &mut rng);
            let short = plan.short;
            // One conditional write per lease, all at once: a first pass over
            // many shards should not wait on them one by one.
            let mut attempts = tokio::task::JoinSet::new();
            for (lease, stealing) in plan.take.into_iter().map(|l| (l, false)).chain(plan.steal.into_iter().map(|l| (l, true))) {
                let (store, me, heartbeat) = (self.store.clone(), self.worker_id.clone(), self.liveness.counter());
                attempts.spawn(async move {
                    let sent = Instant::now();
                    (store.take(&lease, &me, heartbeat).await, lease, stealing, sent)
                });
            }
            let mut lost_race = false;
            while let Some(attempt) = attempts.join_next().await {
                let (result, lease, stealing, sent) = attempt.expect("a take does not panic");
                match result {
                    Ok(Some(updated)) => {
                        if stealing {
                            tracing::info!(shard = %lease.key, from = ?lease.owner, "stole a lease to balance the load");
                        }
                        self.next_id += 1;
                        let liveness = self.liveness.clone();
                        let held = HeldLease::new(self.next_id, self.store.clone(), updated, sent, stealing, liveness, self.settings.clone());
                        let held = Arc::new(held);
                        lock(&self.held).insert(lease.key.clone(), held.clone());
                        taken.push(held);
                    }
                    Ok(None) => lost_race = true,
                    // Leases already taken in this pass stay taken (and get consumers).
                    Err(e) => tracing::warn!(shard = %lease.key, "could not take the lease (next pass tries again): {e}"),
                }
            }
            if !lost_race {
                self.next_expiry = self.next_expiry(&leases);
                // The others learn of the departure at their next read; what
                // is given back before then would wait for them.
                let release = if cover { Vec::new() } else { self.plan_release(&leases) };
                let held = self.held_keys();
                let above = rules::above_target(&leases, &self.view(&held, Instant::now()), &self.settings);
                return Ok(TakePass { taken, release, short, above });
            }
        }
        Ok(TakePass { taken, release: Vec::new(), short: true, above: false })
    }

    /// Heartbeat mode while the operator allows it and every lease's owner
    /// is a kcl-host worker (a heartbeat row, live or dead): a Java KCL
    /// worker judges a lease by its counter, so once one owns a lease (or
    /// 3.x rows show a 3.x fleet) every lease is renewed on its own again.
    fn choose_renewal(&mut self, scan: &LeaseScan) {
        let foreign = scan.leases.iter().filter_map(|l| l.owner.as_deref()).find(|o| *o != self.worker_id && !self.fleet.live.contains(*o) && !self.fleet.dead.contains_key(*o));
        let on = self.settings.heartbeat_leases && self.liveness.keeps_heartbeat() && foreign.is_none() && scan.kcl3_rows == 0;
        if self.liveness.set_heartbeat_leases(on) {
            match (on, foreign) {
                (true, _) => tracing::info!("every lease owner is a kcl-host worker: the heartbeat renews the leases"),
                (false, Some(owner)) => tracing::info!(owner, "a lease is owned by a worker without a heartbeat row (Java KCL?): renewing each lease"),
                (false, None) => tracing::info!("renewing each lease (--lease-renewal per-lease, or Java KCL 3.x rows in the table)"),
            }
        }
    }

    /// Counts the live Java KCL 3.x workers toward the target, logging
    /// each change: their leader assigns them the leases kcl-host gives back.
    fn count_kcl3_workers(&mut self, scan: &LeaseScan) {
        let live = rules::live_kcl3_workers(&scan.kcl3_workers, crate::clock::unix_ms() / 1000);
        if live != self.kcl3_workers {
            tracing::info!(workers = ?live, "Java KCL 3.x workers (metrics rows updated within {}s) count toward each worker's share", rules::KCL3_WORKER_EXPIRY.as_secs());
            self.kcl3_workers = live;
        }
    }

    /// Forgets a held lease the table shows taken by another worker since
    /// this one last wrote it: a Java worker that judged it by its counter
    /// in heartbeat mode. Its consumer stops (its checkpoints would be
    /// refused anyway).
    fn drop_taken_over(&mut self, leases: &[Lease]) {
        let mut held = lock(&self.held);
        for lease in leases {
            let Some(mine) = held.get(&lease.key) else { continue };
            let newer = mine.lease.try_lock().is_ok_and(|written| lease.counter > written.counter);
            if newer && !lease.is_owned_by(&self.worker_id) {
                tracing::warn!(shard = %lease.key, owner = ?lease.owner, "the lease was taken by another worker: stopping its processor");
                mine.mark_lost();
                held.remove(&lease.key);
            }
        }
    }

    fn view<'a>(&'a self, held: &'a HashSet<String>, now: Instant) -> View<'a> {
        View { me: &self.worker_id, held, releasing: &self.releasing, fleet: &self.fleet, kcl3_workers: &self.kcl3_workers, tracker: &self.tracker, now, cover: false }
    }

    /// The keys of the held leases. A lease on its way back that was lost
    /// meanwhile (its consumer ended, or a renewal found it taken) is no
    /// longer on its way back: the rules may take that shard again.
    fn held_keys(&mut self) -> HashSet<String> {
        let held: HashSet<String> = lock(&self.held).keys().cloned().collect();
        self.releasing.retain(|key| held.contains(key));
        held
    }

    /// Picks the held leases to give back, and marks them as on their way.
    fn plan_release(&mut self, leases: &[Lease]) -> Vec<String> {
        let held = self.held_keys();
        let count = rules::plan_release(leases, &self.view(&held, Instant::now()), &self.settings);
        let mut candidates: Vec<String> = held.difference(&self.releasing).cloned().collect();
        candidates.sort();
        let release: Vec<String> = candidates.into_iter().rev().take(count).collect();
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
    }

    /// This worker's heartbeat clock, for the task that writes the heartbeat.
    pub fn liveness(&self) -> Arc<Liveness> {
        self.liveness.clone()
    }

    /// The scan's leases, less those with a parent whose row cannot be read:
    /// that parent may not be finished, so its children wait (and the log
    /// says why, once per child).
    fn without_unreadable_parents(&mut self, scan: LeaseScan) -> Vec<Lease> {
        let LeaseScan { leases, unreadable, .. } = scan;
        leases
            .into_iter()
            .filter(|lease| {
                let Some(parent) = lease.parents.iter().find(|p| unreadable.contains(*p)) else { return true };
                if self.waiting_logged.insert(lease.key.clone()) {
                    tracing::warn!(
                        shard = %lease.key,
                        "waiting: the lease row of its parent {parent} cannot be read, so the parent may not be finished; \
                         repair that row (or delete it if the parent was processed)"
                    );
                }
                false
            })
            .collect()
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

    /// Gives one lease back (owner cleared) so other workers take it in their next pass.
    pub async fn evict(&mut self, key: &str) -> Result<(), LeaseError> {
        self.releasing.remove(key);
        let removed = lock(&self.held).remove(key);
        if let Some(held) = removed {
            held.mark_lost();
            let lease = held.lease.lock().await;
            self.store.evict(&lease).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::memory::MemoryStore;
    use std::collections::BTreeSet;
    use crate::lease::Checkpoint;

    /// A table of free leases `keys`, none with parents.
    async fn table(keys: &[&str]) -> Arc<MemoryStore> {
        let store = Arc::new(MemoryStore::default());
        for key in keys {
            store.create(&Lease::new(*key, Checkpoint::TrimHorizon, BTreeSet::new())).await.unwrap();
        }
        store
    }

    #[tokio::test]
    async fn checkpoints_are_fenced_once_another_worker_takes_the_lease() {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let held = a.take_pass().await.unwrap().taken.pop().unwrap();
        let position = crate::records::Position::new("5", 0).unwrap();
        held.checkpoint(Checkpoint::At(position.clone()), &BTreeSet::new()).await.unwrap();

        // Another worker takes it (as a steal or after expiry would).
        let current = store.get("s0").unwrap();
        store.take(&current, "b", None).await.unwrap().unwrap();

        let err = held.checkpoint(Checkpoint::ShardEnd, &BTreeSet::new()).await.unwrap_err();
        assert_eq!(err, CheckpointFailure::LeaseLost);
        assert!(!held.is_valid());
        assert_eq!(store.get("s0").unwrap().checkpoint, Checkpoint::At(position));
        assert_eq!(a.renew_all().await.len(), 1, "the renewal notices too");
    }

    #[tokio::test]
    async fn a_lease_whose_consumer_ended_is_taken_again() {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let first = a.take_pass().await.unwrap().taken.pop().unwrap();
        // The consumer stops (its validity ran out) while renewals still succeed.
        a.consumer_ended(&first);
        assert!(a.renew_all().await.is_empty());
        let again = a.take_pass().await.unwrap().taken;
        assert_eq!(again.len(), 1, "the next pass takes it again, for a new consumer");
        assert_ne!(again[0].id(), first.id());
        // The old consumer's end, reported late, does not drop the new take.
        a.consumer_ended(&first);
        assert!(a.take_pass().await.unwrap().taken.is_empty(), "still held by the new take");
        assert!(again[0].is_valid());
    }

    #[tokio::test]
    async fn a_lease_lost_while_it_was_being_given_back_is_taken_again() {
        let store = table(&["s0", "s1", "s2", "s3"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let taken = a.take_pass().await.unwrap().taken;
        a.set_fleet(Fleet { live: ["a".to_owned(), "b".to_owned()].into(), dead: Default::default() });
        let release = a.take_pass().await.unwrap().release;
        assert_eq!(release.len(), 2);
        // Before its consumer stops, another worker takes one of them; the
        // consumer ends with the lease lost, not stopped (so no evict).
        let lost = taken.iter().find(|h| h.key() == release[0]).unwrap();
        store.take(&store.get(lost.key()).unwrap(), "b", None).await.unwrap().unwrap();
        a.consumer_ended(lost);
        a.evict(&release[1]).await.unwrap();
        // That worker dies: its lease expires into this worker's hands again.
        a.set_fleet(Fleet { live: ["a".to_owned()].into(), dead: [("b".to_owned(), 0)].into() });
        let again: Vec<String> = a.take_pass().await.unwrap().taken.iter().map(|h| h.key().to_owned()).collect();
        assert_eq!(again.len(), 2, "both given-back shards are taken again, {:?} among them: {again:?}", release[0]);
        assert!(again.contains(&release[0]));
    }

    #[tokio::test(start_paused = true)]
    async fn in_a_kcl_host_fleet_the_heartbeat_renews_the_leases_and_a_lapse_is_not_bridged() {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let cover = a.cover();
        cover.heartbeat_written(Instant::now(), 1);
        let held = a.take_pass().await.unwrap().taken.pop().unwrap();
        assert!(a.liveness().heartbeat_leases(), "only kcl-host owners: heartbeat mode");
        let counter = store.get("s0").unwrap().counter;
        let renewer = a.renewer(Duration::from_secs(3));
        for beat in 2..12 {
            tokio::time::advance(Duration::from_secs(3)).await;
            cover.heartbeat_written(Instant::now(), beat);
            assert!(renewer.renew_all().await.is_empty());
            assert!(held.is_valid(), "kept valid by the heartbeat");
        }
        assert_eq!(store.get("s0").unwrap().counter, counter, "30 s without a renewal write");

        // The heartbeat lapses for longer than the failover time: the next
        // beat does not revive the lease; a renewal, fenced by the counter, does.
        tokio::time::advance(Duration::from_secs(11)).await;
        cover.heartbeat_written(Instant::now(), 12);
        assert!(!held.is_valid(), "a lapse is not bridged by a later beat");
        assert!(renewer.renew_all().await.is_empty(), "renewed, since nobody took it");
        assert!(held.is_valid());
        let row = store.get("s0").unwrap();
        assert_eq!((row.counter, row.owner_heartbeat), (counter + 1, Some(12)), "the renewal records the heartbeat after the lapse");
    }

    /// Two workers: `a` holds s0 with its heartbeat at 1, then its beats
    /// stop for longer than the failover time and `b` judges it dead at 1.
    async fn a_judged_dead_by_b() -> (Arc<MemoryStore>, Coordinator<MemoryStore>, Arc<HeldLease<MemoryStore>>, Coordinator<MemoryStore>) {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        a.cover().heartbeat_written(Instant::now(), 1);
        let held = a.take_pass().await.unwrap().taken.pop().unwrap();
        let mut b = Coordinator::new(store.clone(), "b", TakeSettings::default());
        b.cover().heartbeat_written(Instant::now(), 1);
        tokio::time::advance(Duration::from_secs(11)).await;
        b.cover().heartbeat_written(Instant::now(), 2);
        b.set_fleet(Fleet { live: ["b".to_owned()].into(), dead: [("a".to_owned(), 1)].into() });
        (store, a, held, b)
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_that_beats_again_keeps_its_lease_from_a_reader_that_judged_it_dead_before() {
        let (store, a, held, mut b) = a_judged_dead_by_b().await;
        // a beats again and renews before b's next pass; b has not read the heartbeats since.
        a.cover().heartbeat_written(Instant::now(), 2);
        assert!(!held.is_valid(), "not until a renewal records the new heartbeat");
        assert!(a.renewer(Duration::from_secs(3)).renew_all().await.is_empty());
        assert!(held.is_valid());
        assert!(b.take_pass().await.unwrap().taken.is_empty(), "the row records a heartbeat newer than the one b judged dead");
        assert!(store.get("s0").unwrap().is_owned_by("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_worker_that_beats_again_after_its_lease_was_taken_loses_it() {
        let (store, a, held, mut b) = a_judged_dead_by_b().await;
        assert_eq!(b.take_pass().await.unwrap().taken.len(), 1, "the row records the heartbeat b judged dead");
        a.cover().heartbeat_written(Instant::now(), 2);
        assert_eq!(a.renewer(Duration::from_secs(3)).renew_all().await.len(), 1, "the renewal finds the lease taken");
        assert!(!held.is_valid());
        assert!(store.get("s0").unwrap().is_owned_by("b"));
    }

    #[tokio::test]
    async fn an_owner_without_a_heartbeat_row_brings_back_a_renewal_per_lease() {
        let store = table(&["s0", "s1"]).await;
        store.take(&store.get("s1").unwrap(), "java-worker", None).await.unwrap().unwrap();
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        a.cover().heartbeat_written(Instant::now(), 1);
        a.take_pass().await.unwrap();
        assert!(!a.liveness().heartbeat_leases(), "s1's owner has no heartbeat row: Java KCL judges leases by their counters");
        let counter = store.get("s0").unwrap().counter;
        assert!(a.renewer(Duration::ZERO).renew_all().await.is_empty());
        assert_eq!(store.get("s0").unwrap().counter, counter + 1, "renewed with a write");
        let per_lease = Coordinator::new(store.clone(), "b", TakeSettings { heartbeat_leases: false, ..TakeSettings::default() });
        per_lease.cover().heartbeat_written(Instant::now(), 1);
        assert!(!per_lease.liveness().heartbeat_leases(), "--lease-renewal per-lease");
    }

    #[tokio::test]
    async fn a_lease_taken_over_by_another_worker_is_dropped_at_the_next_pass() {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let held = a.take_pass().await.unwrap().taken.pop().unwrap();
        // A Java worker judged it expired by its counter and took it.
        store.take(&store.get("s0").unwrap(), "java-worker", None).await.unwrap().unwrap();
        assert!(held.is_valid(), "nothing told this worker yet");
        a.take_pass().await.unwrap();
        assert!(!held.is_valid(), "the scan shows it taken: its consumer stops");
    }

    #[tokio::test]
    async fn a_child_of_an_unreadable_parent_row_waits() {
        let store = Arc::new(MemoryStore::default());
        store.add_unreadable("parent");
        store.create(&Lease::new("child", Checkpoint::TrimHorizon, BTreeSet::from(["parent".to_owned()]))).await.unwrap();
        store.create(&Lease::new("other", Checkpoint::TrimHorizon, BTreeSet::new())).await.unwrap();
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let taken: Vec<String> = a.take_pass().await.unwrap().taken.iter().map(|h| h.key().to_owned()).collect();
        assert_eq!(taken, ["other"], "an unreadable parent is not a finished parent");
    }

    #[tokio::test]
    async fn renewals_go_on_while_a_take_pass_waits_on_the_table() {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        a.take_pass().await.unwrap();
        let renewer = a.renewer(Duration::ZERO);
        store.hold_scans();
        let pass = tokio::spawn(async move { a.take_pass().await.map(|pass| pass.taken.len()) });
        let before = store.get("s0").unwrap().counter;
        assert!(renewer.renew_all().await.is_empty());
        assert_eq!(store.get("s0").unwrap().counter, before + 1, "renewed while the pass is stuck");
        store.release_scans();
        assert_eq!(pass.await.unwrap().unwrap(), 0);
    }

    #[tokio::test]
    async fn a_failed_take_does_not_lose_the_others_of_the_pass() {
        let store = table(&["s0", "s1", "s2"]).await;
        store.fail_takes_of("s1");
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let mut taken: Vec<String> = a.take_pass().await.unwrap().taken.iter().map(|h| h.key().to_owned()).collect();
        taken.sort();
        assert_eq!(taken, ["s0", "s2"], "the takes that worked are returned, to be spawned");
    }

    #[tokio::test]
    async fn eviction_lets_another_worker_take_the_lease_at_once() {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let held = a.take_pass().await.unwrap().taken.pop().unwrap();
        a.evict("s0").await.unwrap();
        assert!(!held.is_valid());
        let mut b = Coordinator::new(store.clone(), "b", TakeSettings::default());
        assert_eq!(b.take_pass().await.unwrap().taken.len(), 1);
    }

    #[tokio::test]
    async fn a_lease_a_checkpoint_just_wrote_is_not_renewed() {
        let store = table(&["s0"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        let held = a.take_pass().await.unwrap().taken.pop().unwrap();
        let position = crate::records::Position::new("5", 0).unwrap();
        held.checkpoint(Checkpoint::At(position), &BTreeSet::new()).await.unwrap();
        let after_checkpoint = store.get("s0").unwrap().counter;
        assert!(a.renewer(Duration::from_secs(3)).renew_all().await.is_empty());
        assert_eq!(store.get("s0").unwrap().counter, after_checkpoint, "no write: the checkpoint renewed it");
        assert!(a.renewer(Duration::ZERO).renew_all().await.is_empty());
        assert_eq!(store.get("s0").unwrap().counter, after_checkpoint + 1);
    }

    #[tokio::test]
    async fn a_worker_above_its_share_releases_to_a_heartbeating_newcomer() {
        let store = table(&["s0", "s1", "s2", "s3"]).await;
        let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
        assert_eq!(a.take_pass().await.unwrap().taken.len(), 4);
        let fleet = Fleet { live: ["a".to_owned(), "b".to_owned()].into(), dead: Default::default() };
        a.set_fleet(fleet.clone());
        let release = a.take_pass().await.unwrap().release;
        assert_eq!(release.len(), 2);
        assert!(a.take_pass().await.unwrap().release.is_empty(), "not twice");
        for key in &release {
            a.evict(key).await.unwrap();
        }
        let mut b = Coordinator::new(store.clone(), "b", TakeSettings::default());
        b.set_fleet(fleet);
        let pass = b.take_pass().await.unwrap();
        assert_eq!(pass.taken.len(), 2, "the released two, without stealing");
        assert!(a.take_pass().await.unwrap().taken.is_empty() && a.take_pass().await.unwrap().release.is_empty(), "balanced");
    }
}
