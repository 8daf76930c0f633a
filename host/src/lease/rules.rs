//! The lease rules, as pure functions of the table and a clock.
//!
//! - **Ready**: a lease may be processed when it is not at `SHARD_END` and
//!   every parent is at `SHARD_END` or gone from the table ([`is_ready`]).
//! - **Expired**: a lease that has no owner, whose owner's heartbeat has
//!   stopped for the failover time ([`Fleet::dead`]), or whose counter has
//!   not changed for the failover time, on this worker's clock
//!   ([`ExpiryTracker`]; the only rule for owners without a heartbeat, such
//!   as Java KCL workers).
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
//! - **Stealing**: only from owners without a heartbeat (they do not
//!   release), only when nothing is free, only from a worker above the
//!   target (or at it, when this worker is short by more than one), at most
//!   `max_leases_to_steal` at a time: once balanced, nothing moves.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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
        self.seen.get(key).filter(|(seen, _)| *seen == counter).map(|(_, since)| *since + failover_time)
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

/// What one take pass should try, as the leases were read.
#[derive(Debug, Default, PartialEq)]
pub struct TakePlan {
    /// Free or expired leases.
    pub take: Vec<Lease>,
    /// Leases of live workers above the target.
    pub steal: Vec<Lease>,
    /// This worker is short and another is above the target: leases should
    /// be given back (or become stealable) soon, so look again shortly.
    pub short: bool,
}

/// How many leases each worker should hold.
pub fn target(ready: usize, workers: usize, max_leases: usize) -> usize {
    ready.div_ceil(workers.max(1)).min(max_leases)
}

/// What this worker holds and what it could hold, as the leases were read.
pub struct View<'a> {
    /// This worker's id.
    pub me: &'a str,
    /// Leases this worker is processing now (a row naming `me` but not held
    /// is left over from an earlier run, and is taken back first).
    pub held: &'a HashSet<String>,
    /// Held leases already being given back.
    pub releasing: &'a HashSet<String>,
    /// The live and dead workers.
    pub fleet: &'a Fleet,
    /// Live Java KCL 3.x workers ([`live_kcl3_workers`]): they get their
    /// share from their leader, out of the leases kcl-host gives back.
    pub kcl3_workers: &'a BTreeSet<String>,
    /// When each lease was last seen to change.
    pub tracker: &'a ExpiryTracker,
    /// The time of the scan.
    pub now: Instant,
    /// Take every free or expired lease, whatever the target: a watcher
    /// covering a worker that died or stopped while the others read the
    /// fleet seldom ([`crate::control::FleetWatch::covers_departures`]).
    pub cover: bool,
}

/// The ready leases sorted by who may have them.
struct Census<'a> {
    ready: usize,
    /// Held and not being released.
    mine: usize,
    releasing: usize,
    leftover: Vec<&'a Lease>,
    expired: Vec<&'a Lease>,
    free: Vec<&'a Lease>,
    /// Unexpired leases of other owners.
    others: BTreeMap<&'a str, Vec<&'a Lease>>,
    /// Other live workers: owners of unexpired leases and heartbeating kcl-host workers.
    workers: BTreeSet<&'a str>,
    target: usize,
}

impl<'a> Census<'a> {
    fn new(leases: &'a [Lease], view: &View<'a>, settings: &TakeSettings) -> Self {
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        let mut census = Census {
            ready: 0,
            mine: 0,
            releasing: 0,
            leftover: Vec::new(),
            expired: Vec::new(),
            free: Vec::new(),
            others: BTreeMap::new(),
            workers: view.fleet.live.iter().chain(view.kcl3_workers).map(String::as_str).filter(|w| *w != view.me).collect(),
            target: 0,
        };
        for lease in leases.iter().filter(|l| is_ready(l, &by_key)) {
            census.ready += 1;
            let owner = lease.owner.as_deref();
            if view.releasing.contains(&lease.key) {
                census.releasing += 1;
            } else if view.held.contains(&lease.key) {
                census.mine += 1;
            } else if lease.is_owned_by(view.me) {
                census.leftover.push(lease);
            } else if owner.is_none() {
                census.free.push(lease);
            } else if owner.and_then(|o| view.fleet.dead.get(o)).is_some_and(|dead| lease.owner_heartbeat.is_none_or(|h| h <= *dead))
                // A kcl-host worker's lease never expires by its counter: its
                // heartbeat may be what renews it.
                || (owner.is_some_and(|o| !view.fleet.live.contains(o) && !view.fleet.dead.contains_key(o))
                    && view.tracker.is_expired(lease, view.now, settings.failover_time))
            {
                census.expired.push(lease);
            } else {
                let owner = owner.expect("owned");
                census.others.entry(owner).or_default().push(lease);
                census.workers.insert(owner);
            }
        }
        census.target = target(census.ready, census.workers.len() + 1, settings.max_leases);
        census
    }
}

/// Decides which leases this worker should take in this pass.
pub fn plan_take(leases: &[Lease], view: &View<'_>, settings: &TakeSettings, rng: &mut fastrand::Rng) -> TakePlan {
    let Census { leftover, mut expired, mut free, others, mine, target, .. } = Census::new(leases, view, settings);
    let cap = if view.cover { settings.max_leases } else { target };
    let mut need = cap.saturating_sub(mine);

    // Spread workers that start together over different leases.
    rng.shuffle(&mut expired);
    rng.shuffle(&mut free);
    let mut plan = TakePlan::default();
    // This worker's own rows are taken back whatever the target (nobody
    // else would take a live worker's lease); a later pass gives back any
    // above the target.
    for lease in leftover {
        plan.take.push(lease.clone());
        need = need.saturating_sub(1);
    }
    expired.append(&mut free);
    for lease in expired {
        if need == 0 {
            return plan;
        }
        plan.take.push(lease.clone());
        need -= 1;
    }

    plan.short = others.values().any(|leases| leases.len() > target);
    // kcl-host workers above the target release leases themselves.
    let victims = others.iter().filter(|(owner, _)| !view.fleet.live.contains(**owner));
    let Some((_, victims)) = victims.max_by_key(|(owner, leases)| (leases.len(), std::cmp::Reverse(**owner))) else {
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

/// How many held leases this worker should give back: what it holds above
/// the target, but only as many as the live workers below the target cannot
/// fill from free, expired or already released leases (so nothing is given
/// back that nobody would take).
pub fn plan_release(leases: &[Lease], view: &View<'_>, settings: &TakeSettings) -> usize {
    let census = Census::new(leases, view, settings);
    let excess = census.mine.saturating_sub(census.target);
    if excess == 0 {
        return 0;
    }
    let shortfall: usize = census
        .workers
        .iter()
        .map(|w| census.target.saturating_sub(census.others.get(w).map_or(0, Vec::len)))
        .sum();
    let available = census.free.len() + census.expired.len() + census.releasing;
    excess.min(shortfall.saturating_sub(available))
}

/// Whether this worker holds more than the target.
pub fn above_target(leases: &[Lease], view: &View<'_>, settings: &TakeSettings) -> bool {
    let census = Census::new(leases, view, settings);
    census.mine > census.target
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Checkpoint;
    use std::collections::BTreeSet;

    /// No Java KCL 3.x workers.
    static NO_KCL3: BTreeSet<String> = BTreeSet::new();

    fn lease(key: &str, owner: Option<&str>) -> Lease {
        Lease { owner: owner.map(str::to_owned), ..Lease::new(key, Checkpoint::TrimHorizon, BTreeSet::new()) }
    }

    fn plan(leases: &[Lease], me: &str, held: &[&str]) -> TakePlan {
        plan_in(leases, me, held, &Fleet::default())
    }

    /// A plan with a fleet of heartbeating kcl-host workers.
    fn plan_in(leases: &[Lease], me: &str, held: &[&str], fleet: &Fleet) -> TakePlan {
        let held = held.iter().map(|k| k.to_string()).collect();
        let mut tracker = ExpiryTracker::default();
        let now = Instant::now();
        tracker.observe_leases(leases, now);
        let view = View { me, held: &held, releasing: &HashSet::new(), fleet, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false };
        plan_take(leases, &view, &TakeSettings::default(), &mut fastrand::Rng::with_seed(7))
    }

    fn fleet(live: &[&str], dead: &[&str]) -> Fleet {
        Fleet { live: live.iter().map(|w| w.to_string()).collect(), dead: dead.iter().map(|w| (w.to_string(), 0)).collect() }
    }

    fn release(leases: &[Lease], me: &str, releasing: &[&str], fleet: &Fleet) -> usize {
        release_beside(leases, me, releasing, fleet, &NO_KCL3)
    }

    /// [`release`] in a fleet with Java KCL 3.x workers.
    fn release_beside(leases: &[Lease], me: &str, releasing: &[&str], fleet: &Fleet, kcl3_workers: &BTreeSet<String>) -> usize {
        let held: HashSet<String> = leases.iter().filter(|l| l.is_owned_by(me)).map(|l| l.key.clone()).collect();
        let releasing = releasing.iter().map(|k| k.to_string()).collect();
        let mut tracker = ExpiryTracker::default();
        let now = Instant::now();
        tracker.observe_leases(leases, now);
        let view = View { me, held: &held, releasing: &releasing, fleet, kcl3_workers, tracker: &tracker, now, cover: false };
        plan_release(leases, &view, &TakeSettings::default())
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
        assert!(p.take.is_empty() && p.short);
        assert_eq!(p.steal.len(), 1);
        // After one steal: w1 has 1, w2 has 3; target 2: steal one more.
        let mut leases = leases;
        leases[0].owner = Some("w1".into());
        assert_eq!(plan(&leases, "w1", &["s0"]).steal.len(), 1);
        assert!(plan(&leases, "w1", &["s0"]).short);
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
        tracker.observe_leases(&leases, start);
        let mut rng = fastrand::Rng::with_seed(1);
        let (held, fleet) = (HashSet::new(), Fleet::default());
        let at = |now| View { me: "w", held: &held, releasing: &held, fleet: &fleet, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false };
        let early = plan_take(&leases, &at(start + Duration::from_secs(9)), &settings, &mut rng);
        assert!(early.take.is_empty(), "not before the failover time");
        let late = plan_take(&leases, &at(start + Duration::from_secs(10)), &settings, &mut rng);
        assert_eq!(keys(&late.take), BTreeSet::from(["s0"]));
    }

    #[test]
    fn max_leases_caps_the_target() {
        let leases: Vec<_> = (0..10).map(|i| lease(&format!("s{i}"), None)).collect();
        let (held, fleet) = (HashSet::new(), Fleet::default());
        let mut tracker = ExpiryTracker::default();
        let now = Instant::now();
        tracker.observe_leases(&leases, now);
        let view = View { me: "w", held: &held, releasing: &held, fleet: &fleet, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false };
        let settings = TakeSettings { max_leases: 4, ..Default::default() };
        let p = plan_take(&leases, &view, &settings, &mut fastrand::Rng::with_seed(3));
        assert_eq!(p.take.len(), 4);
    }

    #[test]
    fn a_dead_heartbeat_expires_its_leases_at_once() {
        let leases: Vec<_> = (0..4).map(|i| lease(&format!("s{i}"), Some("w2"))).collect();
        assert!(plan_in(&leases, "w1", &[], &fleet(&["w1", "w2"], &[])).take.is_empty());
        let p = plan_in(&leases, "w1", &[], &fleet(&["w1"], &["w2"]));
        assert_eq!(p.take.len(), 4, "the counters just moved, but the heartbeat stopped");
    }

    #[test]
    fn a_heartbeating_worker_is_not_stolen_from_but_releases_to_a_newcomer() {
        let leases: Vec<_> = (0..8).map(|i| lease(&format!("s{i}"), Some("w1"))).collect();
        let both = fleet(&["w1", "w2"], &[]);
        let p = plan_in(&leases, "w2", &[], &both);
        assert!(p.take.is_empty() && p.steal.is_empty(), "w1 releases; nothing to steal");
        assert!(p.short, "and w2 looks again soon");
        assert_eq!(release(&leases, "w1", &[], &both), 4, "w2 holds nothing and is counted");
        assert_eq!(release(&leases, "w1", &["s0", "s1", "s2", "s3"], &both), 0, "already on their way");
        // Without a heartbeat row w2 is invisible until it steals.
        assert_eq!(release(&leases, "w1", &[], &fleet(&["w1"], &[])), 0);
    }

    #[test]
    fn nothing_is_released_that_free_leases_cover_and_nothing_once_balanced() {
        let mut leases: Vec<_> = (0..8).map(|i| lease(&format!("s{i}"), Some("w1"))).collect();
        leases.push(lease("free-1", None));
        leases.push(lease("free-2", None));
        // 10 ready, 2 workers: target 5; w1 has 3 over, w2 needs 5, 2 of them free.
        assert_eq!(release(&leases, "w1", &[], &fleet(&["w1", "w2"], &[])), 3);
        for l in &mut leases[5..] {
            l.owner = Some("w2".into());
        }
        assert_eq!(release(&leases, "w1", &[], &fleet(&["w1", "w2"], &[])), 0, "5 and 5");
    }

    #[test]
    fn a_watcher_covering_a_departure_takes_every_lease_it_left_and_gives_the_excess_back_later() {
        let mut leases: Vec<_> = (0..4).map(|i| lease(&format!("dead-{i}"), Some("w3"))).collect();
        leases.extend((0..2).map(|i| lease(&format!("free-{i}"), None)));
        leases.extend((0..2).map(|i| lease(&format!("mine-{i}"), Some("w1"))));
        leases.extend((0..2).map(|i| lease(&format!("other-{i}"), Some("w2"))));
        let after = fleet(&["w1", "w2"], &["w3"]);
        let held: HashSet<String> = ["mine-0", "mine-1"].map(String::from).into();
        let mut tracker = ExpiryTracker::default();
        let now = Instant::now();
        tracker.observe_leases(&leases, now);
        let none = HashSet::new();
        let view = |cover| View { me: "w1", held: &held, releasing: &none, fleet: &after, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover };
        let settings = TakeSettings::default();
        // 10 ready, 2 live workers: target 5, and w1 holds 2.
        assert_eq!(plan_take(&leases, &view(false), &settings, &mut fastrand::Rng::with_seed(1)).take.len(), 3);
        let covered = plan_take(&leases, &view(true), &settings, &mut fastrand::Rng::with_seed(1));
        assert_eq!(keys(&covered.take), BTreeSet::from(["dead-0", "dead-1", "dead-2", "dead-3", "free-0", "free-1"]));
        // Then it holds 8 where w2 holds 2: 3 go back to w2.
        for l in &mut leases[..6] {
            l.owner = Some("w1".into());
        }
        assert_eq!(release(&leases, "w1", &[], &after), 3);
        let all_mine: HashSet<String> = leases[..8].iter().map(|l| l.key.clone()).collect();
        let view = View { me: "w1", held: &all_mine, releasing: &none, fleet: &after, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false };
        assert!(above_target(&leases, &view, &settings));
    }

    #[test]
    fn a_java_kcl_3_worker_counts_from_its_metrics_row_and_gets_its_share_given_back() {
        let reported = BTreeMap::from([("java-live".to_owned(), 1_000), ("java-gone".to_owned(), 940)]);
        let live = live_kcl3_workers(&reported, 1_059);
        assert_eq!(live, BTreeSet::from(["java-live".to_owned()]), "a row 60 s old is a worker 3.x itself counts as gone");

        let mut leases: Vec<_> = (0..4).map(|i| lease(&format!("s{i}"), Some("w1"))).collect();
        let alone = fleet(&["w1"], &[]);
        assert_eq!(release_beside(&leases, "w1", &[], &alone, &live), 2, "4 leases, 2 workers: 2 go back for its leader to assign");
        leases[3].owner = None;
        assert_eq!(release_beside(&leases, "w1", &[], &alone, &live), 1, "the free one counts toward its share");
        leases[2].owner = Some("java-live".into());
        assert_eq!(release_beside(&leases, "w1", &[], &alone, &live), 0);
        let held: HashSet<String> = ["s0", "s1"].map(String::from).into();
        let mut tracker = ExpiryTracker::default();
        let now = Instant::now();
        tracker.observe_leases(&leases, now);
        let view = View { me: "w1", held: &held, releasing: &HashSet::new(), fleet: &alone, kcl3_workers: &live, tracker: &tracker, now, cover: false };
        assert!(plan_take(&leases, &view, &TakeSettings::default(), &mut fastrand::Rng::with_seed(5)).take.is_empty(), "the free lease is left for the 3.x worker");
    }

    #[test]
    fn owners_without_a_heartbeat_are_still_stolen_from() {
        let leases: Vec<_> = (0..4).map(|i| lease(&format!("s{i}"), Some("java-worker"))).collect();
        assert_eq!(plan_in(&leases, "w1", &[], &fleet(&["w1"], &[])).steal.len(), 1);
    }
}
