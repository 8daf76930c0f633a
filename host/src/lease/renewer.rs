//! Renewals of the leases a [`Coordinator`](super::coordinator::Coordinator)
//! holds, in a task of their own.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
use tokio::time::Instant;

use super::held::{renew_by_deadline, HeldLease, Liveness, Renewal};
use super::{LeaseKey, LeaseStore};

/// The leases this worker holds, shared by the coordinator and its renewer.
pub(super) type HeldMap<S> = Arc<StdMutex<HashMap<LeaseKey, Arc<HeldLease<S>>>>>;

/// The held map; no code panics while holding it.
pub(super) fn lock<S>(held: &HeldMap<S>) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, Arc<HeldLease<S>>>> {
    held.lock().expect("not poisoned")
}

/// Renews the leases a [`Coordinator`](super::coordinator::Coordinator) holds; runs in a task of its own so a
/// slow take pass, shard sync or ListShards never delays a renewal. In
/// heartbeat mode it renews only a lease the heartbeat no longer covers.
pub struct Renewer<S> {
    pub(super) held: HeldMap<S>,
    pub(super) liveness: Arc<Liveness>,
    /// The renewal period: a lease a checkpoint wrote within half of it
    /// needs no renewal yet.
    pub(super) every: Duration,
    /// Renewal writes that failed, so far.
    pub(super) failed: std::sync::atomic::AtomicU64,
}

impl<S: LeaseStore> Renewer<S> {
    /// Renews every held lease at once (one slow write does not hold up the
    /// others), except those a checkpoint wrote within the last half
    /// renewal period (so the longest gap between writes is one and a half
    /// periods); returns, and forgets, the ones lost.
    pub async fn renew_all(&self) -> Vec<Arc<HeldLease<S>>> {
        let mut renewals = tokio::task::JoinSet::new();
        for lease in self.due() {
            renewals.spawn(renew_by_deadline(lease));
        }
        let mut lost = Vec::new();
        while let Some(renewal) = renewals.join_next().await {
            let (renewal, lease) = renewal.expect("a renewal does not panic");
            if self.settle(renewal, &lease) {
                lost.push(lease);
            }
        }
        lost
    }

    /// Renews the held leases every period until the task is aborted, each
    /// renewal on its own: a slow write holds up neither the others nor the
    /// next round (its lease is skipped while the write is out), and is given
    /// up when the lease's validity ends. `on_failed` hears of each renewal
    /// write that failed, `on_lost` of each lease lost.
    pub async fn run(&self, mut on_failed: impl FnMut(), mut on_lost: impl FnMut(&HeldLease<S>)) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.reset();
        let mut renewals = tokio::task::JoinSet::new();
        let mut out = HashSet::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    for lease in self.due() {
                        if out.insert(lease.id()) {
                            renewals.spawn(renew_by_deadline(lease));
                        }
                    }
                }
                Some(renewal) = renewals.join_next() => {
                    let (renewal, lease) = renewal.expect("a renewal does not panic");
                    out.remove(&lease.id());
                    if matches!(renewal, Renewal::Failed) {
                        on_failed();
                    }
                    if self.settle(renewal, &lease) {
                        on_lost(&lease);
                    }
                }
            }
        }
    }

    /// The held leases a checkpoint did not write within half a period; in
    /// heartbeat mode, only those that will not stay valid through the next
    /// period (the heartbeat lapsed).
    fn due(&self) -> Vec<Arc<HeldLease<S>>> {
        let now = Instant::now();
        let held = lock(&self.held);
        if self.liveness.heartbeat_leases() {
            return held.values().filter(|l| !l.valid_through(now + self.every) || l.behind_epoch()).cloned().collect();
        }
        let recently = now.checked_sub(self.every / 2);
        held.values().filter(|l| recently.is_none_or(|r| !l.written_after(r)) || l.behind_epoch()).cloned().collect()
    }

    /// Counts a failed renewal; `true` when the lease is lost (and then forgotten).
    fn settle(&self, renewal: Renewal, lease: &Arc<HeldLease<S>>) -> bool {
        let lost = match renewal {
            Renewal::Renewed => false,
            Renewal::Lost => true,
            Renewal::Failed => {
                self.failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                !lease.is_valid()
            }
        };
        if lost {
            lease.mark_lost();
            let mut held = lock(&self.held);
            // Only this take: the shard may have been taken again meanwhile.
            if held.get(lease.key()).is_some_and(|current| Arc::ptr_eq(current, lease)) {
                held.remove(lease.key());
            }
        }
        lost
    }

    /// Renewal writes that failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }
}


/// What a successful heartbeat does to a worker's leases: records it in
/// the worker's [`Liveness`] and, in heartbeat mode, renews each lease
/// still valid when it was sent. Cheap to clone, for the heartbeat task.
pub struct LeaseCover<S> {
    pub(super) held: HeldMap<S>,
    pub(super) liveness: Arc<Liveness>,
}

impl<S> Clone for LeaseCover<S> {
    fn clone(&self) -> Self {
        Self { held: self.held.clone(), liveness: self.liveness.clone() }
    }
}

impl<S: LeaseStore> LeaseCover<S> {
    /// A heartbeat sent at `sent` was written, leaving the counter at `counter`.
    pub fn heartbeat_written(&self, sent: Instant, counter: u64) {
        self.liveness.beat(sent, counter);
        if self.liveness.heartbeat_leases() {
            for lease in lock(&self.held).values() {
                lease.cover(sent);
            }
        }
    }
}
