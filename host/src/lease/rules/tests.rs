//! The rules on tables made up for each case.

use super::*;
use crate::lease::{Checkpoint, LeaseKey};
use std::collections::HashSet;
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
    let held = held.iter().map(|k| LeaseKey::from(*k)).collect();
    let mut tracker = ExpiryTracker::default();
    let now = Instant::now();
    tracker.observe_leases(leases, now);
    let view = View { me, held: &held, releasing: &HashSet::new(), fleet, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false, fleet_read_sent: None, scope: None };
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
    judge(leases, me, releasing, fleet, kcl3_workers, plan_release).len()
}

/// What `rule` says for `me`, holding every lease the table says it owns
/// (`releasing` of them on their way back).
fn judge<T>(
    leases: &[Lease], me: &str, releasing: &[&str], fleet: &Fleet, kcl3_workers: &BTreeSet<String>,
    rule: impl FnOnce(&[Lease], &View<'_>, &TakeSettings) -> T,
) -> T {
    let held: HashSet<LeaseKey> = leases.iter().filter(|l| l.is_owned_by(me)).map(|l| l.key.clone()).collect();
    let releasing = releasing.iter().map(|k| LeaseKey::from(*k)).collect();
    let mut tracker = ExpiryTracker::default();
    let now = Instant::now();
    tracker.observe_leases(leases, now);
    let view = View { me, held: &held, releasing: &releasing, fleet, kcl3_workers, tracker: &tracker, now, cover: false, fleet_read_sent: None, scope: None };
    rule(leases, &view, &TakeSettings::default())
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
    let at = |now| View { me: "w", held: &held, releasing: &held, fleet: &fleet, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false, fleet_read_sent: None, scope: None };
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
    let view = View { me: "w", held: &held, releasing: &held, fleet: &fleet, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false, fleet_read_sent: None, scope: None };
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
    let held: HashSet<LeaseKey> = ["mine-0", "mine-1"].map(LeaseKey::from).into();
    let mut tracker = ExpiryTracker::default();
    let now = Instant::now();
    tracker.observe_leases(&leases, now);
    let none = HashSet::new();
    let view = |cover| View { me: "w1", held: &held, releasing: &none, fleet: &after, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover, fleet_read_sent: None, scope: None };
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
    let all_mine: HashSet<LeaseKey> = leases[..8].iter().map(|l| l.key.clone()).collect();
    let view = View { me: "w1", held: &all_mine, releasing: &none, fleet: &after, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false, fleet_read_sent: None, scope: None };
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
    let held: HashSet<LeaseKey> = ["s0", "s1"].map(LeaseKey::from).into();
    let mut tracker = ExpiryTracker::default();
    let now = Instant::now();
    tracker.observe_leases(&leases, now);
    let view = View { me: "w1", held: &held, releasing: &HashSet::new(), fleet: &alone, kcl3_workers: &live, tracker: &tracker, now, cover: false, fleet_read_sent: None, scope: None };
    assert!(plan_take(&leases, &view, &TakeSettings::default(), &mut fastrand::Rng::with_seed(5)).take.is_empty(), "the free lease is left for the 3.x worker");
}

#[test]
fn a_java_kcl_3_worker_whose_leases_expired_counts_as_stopped_though_its_metrics_row_is_young() {
    let live = BTreeSet::from(["java-1".to_owned()]);
    let leases: Vec<_> = (0..8).map(|i| lease(&format!("s{i}"), Some(if i < 4 { "w1" } else { "java-1" }))).collect();
    let held: HashSet<LeaseKey> = leases[..4].iter().map(|l| l.key.clone()).collect();
    let mut tracker = ExpiryTracker::default();
    let seen = Instant::now();
    tracker.observe_leases(&leases, seen);
    let alone = fleet(&["w1"], &[]);
    let (settings, none) = (TakeSettings::default(), HashSet::new());
    let at = |now| View { me: "w1", held: &held, releasing: &none, fleet: &alone, kcl3_workers: &live, tracker: &tracker, now, cover: false, fleet_read_sent: None, scope: None };
    let renewing = plan_take(&leases, &at(seen), &settings, &mut fastrand::Rng::with_seed(5));
    assert!(renewing.take.is_empty() && renewing.steal.is_empty(), "4 and 4 with a 3.x worker that renews");
    let stopped = plan_take(&leases, &at(seen + settings.failover_time), &settings, &mut fastrand::Rng::with_seed(5));
    assert_eq!(keys(&leases[4..]), keys(&stopped.take), "its leases stood still for the failover time: all are taken");
}

#[test]
fn owners_without_a_heartbeat_are_still_stolen_from() {
    let leases: Vec<_> = (0..4).map(|i| lease(&format!("s{i}"), Some("java-worker"))).collect();
    assert_eq!(plan_in(&leases, "w1", &[], &fleet(&["w1"], &[])).steal.len(), 1);
}

/// A lease row as a kcl-host worker writes it: its heartbeat counter, and whose it is.
fn kcl_host_lease(key: &str, owner: &str) -> Lease {
    Lease { owner_heartbeat: Some(1), owner_heartbeat_worker: Some(owner.to_owned()), ..lease(key, Some(owner)) }
}

/// A kcl-host worker this one has no heartbeat row of (it joined after the
/// last read, or the reads fail) holds every lease, and its counters stand
/// still (the heartbeat renews them): seen at `start`, planned at `now`, the
/// last heartbeat read sent at `read`.
fn plan_beside_an_unread_worker(start: Instant, now: Instant, read: Instant) -> TakePlan {
    let leases: Vec<_> = (0..4).map(|i| kcl_host_lease(&format!("s{i}"), "w2")).collect();
    let (held, fleet) = (HashSet::new(), fleet(&["w1"], &[]));
    let mut tracker = ExpiryTracker::default();
    tracker.observe_leases(&leases, start);
    let view = View { me: "w1", held: &held, releasing: &held, fleet: &fleet, kcl3_workers: &NO_KCL3, tracker: &tracker, now, cover: false, fleet_read_sent: Some(read), scope: None };
    plan_take(&leases, &view, &TakeSettings::default(), &mut fastrand::Rng::with_seed(9))
}

#[test]
fn a_kcl_host_owner_whose_heartbeat_row_was_not_read_is_neither_stolen_from_nor_expired_by_its_still_counter() {
    let start = Instant::now();
    let before = start - Duration::from_millis(1);
    let long_after = start + Duration::from_secs(60);
    let plan = plan_beside_an_unread_worker(start, long_after, before);
    assert_eq!(plan.take, [], "a still counter is no sign of death while no read since could show its row");
    assert_eq!(plan.steal, [], "a kcl-host worker gives leases back itself");
    assert!(plan.short, "it is above the target: look again soon");
}

#[test]
fn a_kcl_host_owner_whose_row_a_later_read_does_not_show_has_left_and_its_leases_expire_by_counter() {
    let start = Instant::now();
    let read = start + Duration::from_secs(1);
    assert_eq!(plan_beside_an_unread_worker(start, start + Duration::from_secs(9), read).take, [], "not before the failover time");
    assert_eq!(plan_beside_an_unread_worker(start, start + Duration::from_secs(10), read).take.len(), 4, "every lease of a worker that left");
}

#[test]
fn a_java_kcl_take_of_a_kcl_host_row_leaves_a_java_owner() {
    let taken_by_java = Lease { owner: Some("java-worker".into()), ..kcl_host_lease("s0", "w2") };
    assert!(!taken_by_java.is_owned_by_kcl_host(), "Java KCL changes the owner, not ownerHeartbeatWorker");
    assert!(kcl_host_lease("s0", "w2").is_owned_by_kcl_host());
}

#[test]
fn a_java_kcl_3_worker_that_released_every_lease_counts_as_stopped_until_it_reports_again() {
    let mut leavers = Kcl3Leavers::default();
    let reports = |lut: u64| BTreeMap::from([("java-1".to_owned(), lut), ("java-2".to_owned(), 100)]);
    let held = [lease("a", Some("java-1")), lease("b", Some("java-1")), lease("c", Some("w"))];
    leavers.observe(&held, &reports(100));
    assert!(!leavers.has_left("java-1"), "it holds leases");
    assert!(!leavers.has_left("java-2"), "a 3.x worker that has held nothing yet (it just joined) is live");
    // Its graceful stop clears the owner of each lease; the metrics row stays.
    let released = [lease("a", None), lease("b", None), lease("c", Some("w"))];
    leavers.observe(&released, &reports(100));
    assert!(leavers.has_left("java-1"));
    leavers.observe(&released, &reports(100));
    assert!(leavers.has_left("java-1"), "still not reporting");
    leavers.observe(&released, &reports(130));
    assert!(!leavers.has_left("java-1"), "it reported again: live, whatever it holds");
    assert!(!leavers.has_left("java-2"));
}

mod streams;
