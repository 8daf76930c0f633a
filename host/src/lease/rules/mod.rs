//! The lease rules, as pure functions of the table and a clock.
//!
//! - **Ready**: a lease may be processed when it is not at `SHARD_END` and
//!   every parent is at `SHARD_END` or gone from the table ([`is_ready`]).
//! - **Expired**: a lease that has no owner, whose owner's heartbeat has
//!   stopped for the failover time ([`Fleet::dead`]), or whose counter has
//!   not changed for the failover time, on this worker's clock
//!   ([`ExpiryTracker`]; the only rule for owners without a heartbeat, such
//!   as Java KCL workers). A kcl-host owner whose heartbeat row was not read
//!   (its lease row names it: [`Lease::is_owned_by_kcl_host`]) is no Java
//!   worker: its counter expires the lease only once a heartbeat read sent
//!   after that counter was first seen shows no row for it.
//! - **Target**: ceil(ready leases / live workers), capped by max leases.
//!   Live workers are the owners of unexpired leases, every kcl-host
//!   worker with a heartbeat and every Java KCL 3.x worker with a recent
//!   metrics row ([`live_kcl3_workers`]), so one that holds nothing yet
//!   counts too.
//! - **Taking**: up to the target at once, expired leases first ([`plan_take`]);
//!   every free and expired lease when covering for a worker that died or
//!   stopped ([`View::cover`]), the excess given back by the next rule.
//! - **Releasing**: a kcl-host worker above the target gives back what the
//!   workers below it cannot get from free leases ([`plan_release`]); the
//!   lease goes after a checkpoint, with no overlap and no failover wait.
//! - **Swapping**: in a multi-stream table, two kcl-host workers at the
//!   target, each holding two more than the other of one stream, trade one
//!   lease ([`plan_swap`]), so every worker keeps a share of every stream.
//! - **Stealing**: only from owners that are not kcl-host workers, by
//!   heartbeat row or lease row (they do not release), only when nothing is free, only from a worker above the
//!   target (or at it, when this worker is short by more than one), at most
//!   `max_leases_to_steal` at a time: once balanced, nothing moves.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::Lease;

mod census;
mod plan;
pub use census::View;
pub use plan::{above_target, plan_release, plan_swap, plan_take, TakePlan};

/// Settings for taking leases, with the Java KCL's names and defaults.
#[derive(Clone, Debug)]
pub struct TakeSettings {
    /// `failoverTimeMillis`: how long a lease's counter must stay unchanged
    /// before another worker may take it (default 10 s).
    pub failover_time: Duration,
    /// `maxLeasesForWorker`: most leases this worker holds (default: no limit).
    pub max_leases: usize,
    /// `maxLeasesToStealAtOneTime` (default 1).
    pub max_leases_to_steal: usize,
    /// Whether the heartbeat may renew the leases while every owner in the
    /// table is a kcl-host worker (`--lease-renewal auto`, the default);
    /// `false` writes a renewal per lease always, as Java KCL does.
    pub heartbeat_leases: bool,
}

impl Default for TakeSettings {
    fn default() -> Self {
        Self { failover_time: Duration::from_secs(10), max_leases: usize::MAX, max_leases_to_steal: 1, heartbeat_leases: true }
    }
}

/// When each counter (a lease's, or a worker's heartbeat) last changed, as
/// seen by this worker.
#[derive(Debug, Default)]
pub struct ExpiryTracker {
    seen: HashMap<String, (u64, Instant)>,
}

impl ExpiryTracker {
    /// Notes the counters of a fresh read; keys not in it are forgotten.
    pub fn observe<'a>(&mut self, counters: impl IntoIterator<Item = (&'a str, u64)>, now: Instant) {
        let counters: HashMap<&str, u64> = counters.into_iter().collect();
        self.seen.retain(|key, _| counters.contains_key(key.as_str()));
        for (key, counter) in counters {
            let entry = self.seen.entry(key.to_owned()).or_insert((counter, now));
            if entry.0 != counter {
                *entry = (counter, now);
            }
        }
    }

    /// Notes the counters of a fresh read of the lease table.
    pub fn observe_leases(&mut self, leases: &[Lease], now: Instant) {
        self.observe(leases.iter().map(|l| (l.key.as_str(), l.counter)), now);
    }

    /// When `key` goes stale if its counter stays at `counter`: one failover
    /// time after this worker first saw that value.
    pub fn stale_at(&self, key: &str, counter: u64, failover_time: Duration) -> Option<Instant> {
        self.first_seen(key, counter).map(|since| since + failover_time)
    }

    /// When this worker first saw `key` at `counter`, if it is still there.
    pub fn first_seen(&self, key: &str, counter: u64) -> Option<Instant> {
        self.seen.get(key).filter(|(seen, _)| *seen == counter).map(|(_, since)| *since)
    }

    /// Whether `key`'s counter has stayed at `counter` for `failover_time`.
    pub fn is_stale(&self, key: &str, counter: u64, now: Instant, failover_time: Duration) -> bool {
        self.stale_at(key, counter, failover_time).is_some_and(|at| now >= at)
    }

    /// Whether `lease` may be taken without stealing: unowned, or its owner
    /// has not renewed it for `failover_time`.
    pub fn is_expired(&self, lease: &Lease, now: Instant, failover_time: Duration) -> bool {
        lease.owner.is_none() || self.is_stale(&lease.key, lease.counter, now, failover_time)
    }
}

/// How long a Java KCL 3.x worker counts as live after its metrics row's
/// last update: 3.x's own default (two reports 30 s apart), so kcl-host
/// counts the workers the 3.x leader assigns leases to.
pub const KCL3_WORKER_EXPIRY: Duration = Duration::from_secs(60);

/// The Java KCL 3.x workers that count as live at `unix_now` (epoch
/// seconds): those whose metrics row (`lut`) is younger than
/// [`KCL3_WORKER_EXPIRY`]. Judged on the wall clock, as 3.x judges them.
pub fn live_kcl3_workers(last_updates: &BTreeMap<String, u64>, unix_now: u64) -> BTreeSet<String> {
    last_updates
        .iter()
        .filter(|(_, lut)| unix_now.saturating_sub(**lut) < KCL3_WORKER_EXPIRY.as_secs())
        .map(|(worker, _)| worker.clone())
        .collect()
}

/// Java KCL 3.x workers that gave up every lease they held and have not
/// reported since: 3.x's graceful stop releases its leases (owner cleared)
/// but leaves its metrics row, which counts as live for up to
/// [`KCL3_WORKER_EXPIRY`]. Counting such a worker would keep kcl-host at
/// half the shards, the rest free, for that long. A worker that reports
/// again, or holds a lease again, counts as live again.
#[derive(Debug, Default)]
pub struct Kcl3Leavers {
    /// The 3.x workers holding a lease at the last look.
    holding: BTreeSet<String>,
    /// Worker → its metrics row's `lut` when it was first seen holding none.
    emptied: BTreeMap<String, u64>,
}

impl Kcl3Leavers {
    /// Notes who holds `leases` now, given the 3.x workers' `last_updates`.
    pub fn observe(&mut self, leases: &[Lease], last_updates: &BTreeMap<String, u64>) {
        let holding: BTreeSet<String> = leases.iter().filter_map(|l| l.owner.clone()).filter(|o| last_updates.contains_key(o)).collect();
        for gone in self.holding.difference(&holding) {
            self.emptied.insert(gone.clone(), last_updates.get(gone).copied().unwrap_or_default());
        }
        self.emptied.retain(|worker, lut| !holding.contains(worker) && last_updates.get(worker).is_some_and(|now| now <= lut));
        self.holding = holding;
    }

    /// Whether `worker` gave up its last lease and has not reported since.
    pub fn has_left(&self, worker: &str) -> bool {
        self.emptied.contains_key(worker)
    }
}

/// The kcl-host workers of an application, as their heartbeat rows show them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fleet {
    /// Workers whose heartbeat moved within the failover time (this one included).
    pub live: BTreeSet<String>,
    /// Workers whose heartbeat has not moved for the failover time, with
    /// that heartbeat: they hold nothing any more, whatever their lease rows
    /// say, unless a row records a newer heartbeat (the worker beat again
    /// since this read; see [`super::Lease::owner_heartbeat`]).
    pub dead: BTreeMap<String, u64>,
}

/// Whether `lease` may be processed: not finished, and every parent either
/// finished or no longer in the table.
pub fn is_ready(lease: &Lease, by_key: &HashMap<&str, &Lease>) -> bool {
    !lease.is_finished()
        && lease.parents.iter().all(|parent| by_key.get(parent.as_str()).is_none_or(|p| p.is_finished()))
}

/// How many leases each worker should hold.
pub fn target(ready: usize, workers: usize, max_leases: usize) -> usize {
    ready.div_ceil(workers.max(1)).min(max_leases)
}

#[cfg(test)]
mod tests;
