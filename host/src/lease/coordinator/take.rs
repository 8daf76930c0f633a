//! A take pass in three steps, each on a screen of its own: the census (read
//! the table, note what it shows), the plan ([`rules::plan_take`]: what to
//! take and steal) and applying it (one conditional write per lease), then
//! what to give back ([`rules::plan_release`]).

use std::sync::Arc;

use tokio::time::Instant;

use super::{Coordinator, HeldLease};
use crate::lease::renewer::lock;
use crate::lease::rules::{self, TakePlan, View};
use crate::lease::{Lease, LeaseError, LeaseKey, LeaseScan, LeaseStore};

/// What one take pass decided.
pub struct TakePass<S> {
    /// Leases newly taken; the caller starts a consumer for each.
    pub taken: Vec<Arc<HeldLease<S>>>,
    /// Held leases to give back to balance the fleet: the caller stops their
    /// consumers (`shutdown(requested)`, so they checkpoint) and then calls
    /// [`Coordinator::evict`].
    pub release: Vec<LeaseKey>,
    /// Short of the target while another worker is above it, or taking
    /// nothing while this worker's heartbeat is overdue: pass again soon.
    pub short: bool,
    /// Above the target (after covering a departure, say): pass again once
    /// the others have read the fleet, to give the excess back to them.
    pub above: bool,
}

impl<S> TakePass<S> {
    /// A pass that took what it could and gives nothing back: pass again soon.
    fn cut_short(taken: Vec<Arc<HeldLease<S>>>) -> Self {
        Self { taken, release: Vec::new(), short: true, above: false }
    }
}

/// How many times one pass re-reads the table after losing a race for a lease.
const TAKE_ROUNDS: usize = 3;

impl<S: LeaseStore> Coordinator<S> {
    /// One take pass: reads the table and takes every lease the rules give
    /// this worker, re-reading when another worker won a race, then decides
    /// what to give back to balance the fleet. A take that fails is logged
    /// and left for the next pass; only a failed read of the table (before
    /// anything was taken) is an error.
    pub async fn take_pass(&mut self) -> Result<TakePass<S>, LeaseError> {
        let mut taken = Vec::new();
        if !self.liveness.is_valid(Instant::now()) {
            tracing::warn!("taking no leases: this worker's heartbeat is overdue, so the others would take them; trying again soon");
            return Ok(TakePass::cut_short(taken));
        }
        let cover = std::mem::take(&mut self.cover);
        for _ in 0..TAKE_ROUNDS {
            let (leases, now) = self.census().await?;
            let held = self.held_keys();
            let mut rng = self.rng.fork();
            self.swaps.observe(&leases, &self.worker_id, self.settings.failover_time, now);
            let mut plan = rules::plan_take(&leases, &View { cover, ..self.view(&held, now) }, &self.settings, &mut rng);
            self.swaps.keep_for_takers(&mut plan);
            let short = plan.short;
            if self.apply(plan, &mut taken).await {
                continue;
            }
            self.next_expiry = self.next_expiry(&leases);
            // The others learn of the departure at their next read; what
            // is given back before then would wait for them.
            let release = if cover { Vec::new() } else { self.plan_release(&leases) };
            let held = self.held_keys();
            let above = rules::above_target(&leases, &self.view(&held, Instant::now()), &self.settings);
            self.note_settled();
            return Ok(TakePass { taken, release, short, above });
        }
        Ok(TakePass::cut_short(taken))
    }

    /// Reads the table and notes what it shows (counters, the renewal mode,
    /// Java KCL 3.x workers, leases taken over): the leases the rules judge,
    /// and the moment of the read.
    async fn census(&mut self) -> Result<(Vec<Lease>, Instant), LeaseError> {
        let scan = self.store.scan().await?;
        let now = Instant::now();
        self.tracker.observe_leases(&scan.leases, now);
        self.choose_renewal(&scan);
        self.count_kcl3_workers(&scan);
        self.drop_taken_over(&scan.leases);
        self.leases = scan.leases.clone();
        Ok((self.without_unreadable_parents(scan), now))
    }

    /// Takes and steals what `plan` says, one conditional write per lease,
    /// all at once (a first pass over many shards should not wait on them
    /// one by one); adds what it took to `taken`. `true` when another
    /// worker won a race for one: the table is worth reading again.
    async fn apply(&mut self, plan: TakePlan, taken: &mut Vec<Arc<HeldLease<S>>>) -> bool {
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
                    // The table as this worker now knows it, for `settled`.
                    if let Some(read) = self.leases.iter_mut().find(|l| l.key == updated.key) {
                        *read = updated.clone();
                    }
                    if stealing {
                        tracing::info!(shard = %lease.key, from = ?lease.owner, "stole a lease to balance the load");
                    }
                    self.next_id += 1;
                    let liveness = self.liveness.clone();
                    let held = Arc::new(HeldLease::new(self.next_id, self.store.clone(), updated, sent, stealing, liveness, self.settings.clone()));
                    lock(&self.held).insert(lease.key.clone(), held.clone());
                    taken.push(held);
                }
                Ok(None) => lost_race = true,
                // Leases already taken in this pass stay taken (and get consumers).
                Err(e) => tracing::warn!(shard = %lease.key, "could not take the lease (next pass tries again): {e}"),
            }
        }
        lost_race
    }

    /// Heartbeat mode while the operator allows it and every lease's owner
    /// is a kcl-host worker (a heartbeat row, live or dead, or a lease row
    /// that says so): a Java KCL
    /// worker judges a lease by its counter, so once one owns a lease (or
    /// 3.x rows show a 3.x fleet) every lease is renewed on its own again.
    fn choose_renewal(&mut self, scan: &LeaseScan) {
        let foreign = scan
            .leases
            .iter()
            .filter(|l| !l.is_owned_by_kcl_host())
            .filter_map(|l| l.owner.as_deref())
            .find(|o| *o != self.worker_id && !self.fleet.live.contains(*o) && !self.fleet.dead.contains_key(*o));
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
        self.kcl3_in_table = scan.kcl3_rows > 0;
        self.kcl3_leavers.observe(&scan.leases, &scan.kcl3_workers);
        let mut live = rules::live_kcl3_workers(&scan.kcl3_workers, crate::clock::unix_ms() / 1000);
        live.retain(|worker| !self.kcl3_leavers.has_left(worker));
        if live != self.kcl3_workers {
            tracing::info!(
                workers = ?live,
                "Java KCL 3.x workers (metrics rows updated within {}s, less those that released their last lease and have not reported since) count toward each worker's share",
                rules::KCL3_WORKER_EXPIRY.as_secs()
            );
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
}
