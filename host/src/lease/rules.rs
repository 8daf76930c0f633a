//! The lease rules, as pure functions of the table and a clock.
//!
//! - **Ready**: a lease may be processed when it is not at `SHARD_END` and
//!   every parent is at `SHARD_END` or gone from the table ([`is_ready`]).
//! - **Expired**: a lease whose counter has not changed for the failover time,
//!   on this worker's clock, or that has no owner ([`ExpiryTracker`]).
//! - **Target**: ceil(ready leases / live workers), capped by max leases.
//! - **Taking**: up to the target at once, expired leases first ([`plan_take`]).
//! - **Stealing**: only when nothing is free, only from a worker above the
//!   target (or at it, when this worker is short by more than one), at most
//!   `max_leases_to_steal` at a time: once balanced, nothing moves.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::Lease;

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
}

impl Default for TakeSettings {
    fn default() -> Self {
        Self { failover_time: Duration::from_secs(10), max_leases: usize::MAX, max_leases_to_steal: 1 }
    }
}

/// When each lease's counter last changed, as seen by this worker.
#[derive(Debug, Default)]
pub struct ExpiryTracker {
    seen: HashMap<String, (u64, Instant)>,
}

impl ExpiryTracker {
    /// Notes the counters in a fresh read of the table.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        let keys: HashSet<&str> = leases.iter().map(|l| l.key.as_str()).collect();
        self.seen.retain(|key, _| keys.contains(key.as_str()));
        for lease in leases {
            let entry = self.seen.entry(lease.key.clone()).or_insert((lease.counter, now));
            if entry.0 != lease.counter {
                *entry = (lease.counter, now);
            }
        }
    }

    /// Whether `lease` may be taken without stealing: unowned, or its owner
    /// has not renewed it for `failover_time`.
    pub fn is_expired(&self, lease: &Lease, now: Instant, failover_time: Duration) -> bool {
        lease.owner.is_none()
            || self
                .seen
                .get(&lease.key)
                .is_some_and(|(counter, since)| *counter == lease.counter && now.duration_since(*since) >= failover_time)
    }
}

/// Whether `lease` may be processed: not finished, and every parent either
/// finished or no longer in the table.
pub fn is_ready(lease: &Lease, by_key: &HashMap<&str, &Lease>) -> bool {
    !lease.is_finished()
        && lease.parents.iter().all(|parent| by_key.get(parent.as_str()).is_none_or(|p| p.is_finished()))
}

/// What one take pass should try, as the leases were read.
#[derive(Debug, Default, PartialEq)]
pub struct TakePlan {
    /// Free or expired leases.
    pub take: Vec<Lease>,
    /// Leases of live workers above the target.
    pub steal: Vec<Lease>,
}

/// How many leases each worker should hold.
pub fn target(ready: usize, workers: usize, max_leases: usize) -> usize {
    ready.div_ceil(workers.max(1)).min(max_leases)
}

/// Decides which leases `me` should take in this pass. `held` are the leases
/// this worker is processing now (a row naming `me` but not held is left
/// over from an earlier run, and is taken back first).
pub fn plan_take(
    leases: &[Lease],
    me: &str,
    held: &HashSet<String>,
    tracker: &ExpiryTracker,
    now: Instant,
    settings: &TakeSettings,
    rng: &mut fastrand::Rng,
) -> TakePlan {
    let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
    let ready: Vec<&Lease> = leases.iter().filter(|l| is_ready(l, &by_key)).collect();

    let mut mine = 0;
    let mut leftover = Vec::new(); // ours from an earlier run
    let mut expired = Vec::new(); // a dead worker's
    let mut free = Vec::new(); // nobody's
    let mut others: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    for &lease in &ready {
        if held.contains(&lease.key) {
            mine += 1;
        } else if lease.is_owned_by(me) {
            leftover.push(lease);
        } else if lease.owner.is_none() {
            free.push(lease);
        } else if tracker.is_expired(lease, now, settings.failover_time) {
            expired.push(lease);
        } else {
            others.entry(lease.owner.as_deref().expect("owned")).or_default().push(lease);
        }
    }

    let workers = others.len() + 1;
    let target = target(ready.len(), workers, settings.max_leases);
    let mut need = target.saturating_sub(mine);

    // Spread workers that start together over different leases.
    rng.shuffle(&mut expired);
    rng.shuffle(&mut free);
    let mut plan = TakePlan::default();
    for lease in leftover.into_iter().chain(expired).chain(free) {
        if need == 0 {
            break;
        }
        plan.take.push(lease.clone());
        need -= 1;
    }
    if need == 0 {
        return plan;
    }

    let Some((_, victims)) = others.iter().max_by_key(|(owner, leases)| (leases.len(), std::cmp::Reverse(*owner))) else {
        return plan;
    };
    let most = victims.len();
    let steal = if most > target {
        need.min(most - target)
    } else if most == target && need > 1 {
        1
    } else {
        0
    };
    let mut victims = victims.clone();
    rng.shuffle(&mut victims);
    plan.steal = victims.into_iter().take(steal.min(settings.max_leases_to_steal)).cloned().collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Checkpoint;
    use std::collections::BTreeSet;

    fn lease(key: &str, owner: Option<&str>) -> Lease {
        Lease { owner: owner.map(str::to_owned), ..Lease::new(key, Checkpoint::TrimHorizon, BTreeSet::new()) }
    }

    fn plan(leases: &[Lease], me: &str, held: &[&str]) -> TakePlan {
        let held = held.iter().map(|k| k.to_string()).collect();
        let mut tracker = ExpiryTracker::default();
        let now = Instant::now();
        tracker.observe(leases, now);
        plan_take(leases, me, &held, &tracker, now, &TakeSettings::default(), &mut fastrand::Rng::with_seed(7))
    }

    fn keys(leases: &[Lease]) -> BTreeSet<&str> {
        leases.iter().map(|l| l.key.as_str()).collect()
    }

    #[test]
    fn the_first_pass_takes_every_free_lease_at_once() {
        let leases: Vec<_> = (0..64).map(|i| lease(&format!("s{i}"), None)).collect();
        assert_eq!(plan(&leases, "w1", &[]).take.len(), 64);
    }

    #[test]
    fn a_finished_lease_is_never_taken_and_frees_its_children() {
        let mut parent = lease("p", None);
        parent.checkpoint = Checkpoint::ShardEnd;
        let mut child = lease("c", None);
        child.parents = BTreeSet::from(["p".to_owned()]);
        assert_eq!(keys(&plan(&[parent, child], "w", &[]).take), BTreeSet::from(["c"]));
    }

    #[test]
    fn a_child_waits_for_every_parent() {
        let mut done = lease("p1", None);
        done.checkpoint = Checkpoint::ShardEnd;
        let open = lease("p2", Some("other"));
        let mut child = lease("c", None);
        child.parents = BTreeSet::from(["p1".to_owned(), "p2".to_owned()]);
        assert!(plan(&[done, open, child], "w", &[]).take.is_empty());
    }

    #[test]
    fn a_child_whose_parent_aged_out_is_ready() {
        let mut child = lease("c", None);
        child.parents = BTreeSet::from(["gone".to_owned()]);
        assert_eq!(plan(&[child], "w", &[]).take.len(), 1);
    }

    #[test]
    fn takes_only_up_to_its_share() {
        let mut leases: Vec<_> = (0..6).map(|i| lease(&format!("s{i}"), None)).collect();
        leases[0].owner = Some("w2".into());
        // 6 ready leases, 2 live workers: target 3.
        assert_eq!(plan(&leases, "w1", &[]).take.len(), 3);
    }

    #[test]
    fn steals_one_at_a_time_from_the_most_loaded_and_stops_when_balanced() {
        let leases: Vec<_> = (0..4).map(|i| lease(&format!("s{i}"), Some("w2"))).collect();
        let p = plan(&leases, "w1", &[]);
        assert!(p.take.is_empty());
        assert_eq!(p.steal.len(), 1);
        // After one steal: w1 has 1, w2 has 3; target 2: steal one more.
        let mut leases = leases;
        leases[0].owner = Some("w1".into());
        assert_eq!(plan(&leases, "w1", &["s0"]).steal.len(), 1);
        // 2 and 2: balanced, nothing moves either way.
        leases[1].owner = Some("w1".into());
        assert_eq!(plan(&leases, "w1", &["s0", "s1"]), TakePlan::default());
        assert_eq!(plan(&leases, "w2", &["s2", "s3"]), TakePlan::default());
    }

    #[test]
    fn expired_leases_are_taken_after_the_failover_time() {
        let leases = vec![lease("s0", Some("dead"))];
        let mut tracker = ExpiryTracker::default();
        let start = Instant::now();
        let settings = TakeSettings::default();
        tracker.observe(&leases, start);
        let mut rng = fastrand::Rng::with_seed(1);
        let early = plan_take(&leases, "w", &HashSet::new(), &tracker, start + Duration::from_secs(9), &settings, &mut rng);
        assert!(early.take.is_empty(), "not before the failover time");
        let late = plan_take(&leases, "w", &HashSet::new(), &tracker, start + Duration::from_secs(10), &settings, &mut rng);
        assert_eq!(keys(&late.take), BTreeSet::from(["s0"]));
    }

    #[test]
    fn max_leases_caps_the_target() {
        let leases: Vec<_> = (0..10).map(|i| lease(&format!("s{i}"), None)).collect();
        let held = HashSet::new();
        let mut tracker = ExpiryTracker::default();
        let now = Instant::now();
        tracker.observe(&leases, now);
        let settings = TakeSettings { max_leases: 4, ..Default::default() };
        let p = plan_take(&leases, "w", &held, &tracker, now, &settings, &mut fastrand::Rng::with_seed(3));
        assert_eq!(p.take.len(), 4);
    }
}
