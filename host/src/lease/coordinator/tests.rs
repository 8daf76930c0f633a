//! The coordinator against an in-memory lease table.

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
    let lost = taken.iter().find(|h| *h.key() == release[0]).unwrap();
    store.take(&store.get(lost.key()).unwrap(), "b", None).await.unwrap().unwrap();
    a.consumer_ended(lost);
    a.evict(&release[1]).await.unwrap();
    // That worker dies: its lease expires into this worker's hands again.
    a.set_fleet(Fleet { live: ["a".to_owned()].into(), dead: [("b".to_owned(), 0)].into() });
    let again: Vec<String> = a.take_pass().await.unwrap().taken.iter().map(|h| h.key().to_string()).collect();
    assert_eq!(again.len(), 2, "both given-back shards are taken again, {:?} among them: {again:?}", release[0]);
    assert!(again.contains(&release[0].to_string()));
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
    let taken: Vec<String> = a.take_pass().await.unwrap().taken.iter().map(|h| h.key().to_string()).collect();
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
    let mut taken: Vec<String> = a.take_pass().await.unwrap().taken.iter().map(|h| h.key().to_string()).collect();
    taken.sort();
    assert_eq!(taken, ["s0", "s2"], "the takes that worked are returned, to be spawned");
}

#[tokio::test]
async fn eviction_lets_another_worker_take_the_lease_at_once() {
    let store = table(&["s0"]).await;
    let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
    let held = a.take_pass().await.unwrap().taken.pop().unwrap();
    assert!(a.evict("s0").await.unwrap(), "given back");
    assert!(!held.is_valid());
    let mut b = Coordinator::new(store.clone(), "b", TakeSettings::default());
    assert_eq!(b.take_pass().await.unwrap().taken.len(), 1);
}

#[tokio::test]
async fn a_lease_another_worker_took_first_is_not_reported_as_given_back() {
    let store = table(&["s0"]).await;
    let mut a = Coordinator::new(store.clone(), "a", TakeSettings::default());
    a.take_pass().await.unwrap();
    let row = store.list().await.unwrap().pop().unwrap();
    store.take(&row, "b", None).await.unwrap().expect("b takes it");
    assert!(!a.evict("s0").await.unwrap(), "the conditional give-back found b's take");
    assert_eq!(store.list().await.unwrap()[0].owner.as_deref(), Some("b"), "b keeps it");
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

#[tokio::test]
async fn passes_are_rare_only_while_every_lease_is_held_by_a_live_kcl_host_worker() {
    let store = table(&["s0", "s1"]).await;
    let settings = TakeSettings::default();
    let failover = settings.failover_time;
    let mut a = Coordinator::new(store.clone(), "a", settings);
    let watch = FleetWatch::new("a", failover);
    a.set_fleet(Fleet { live: ["a".to_owned(), "b".to_owned()].into(), dead: Default::default() });
    let mine = a.take_pass().await.unwrap().taken.pop().unwrap().key().to_owned();
    assert!(!a.settled(), "a lease nobody holds");
    assert_eq!(a.pass_interval(false, false, &watch), failover * 2);
    // Live b takes the other: every lease held by a live kcl-host worker.
    let other = if &*mine == "s0" { "s1" } else { "s0" };
    store.take(&store.get(other).unwrap(), "b", None).await.unwrap().unwrap();
    a.take_pass().await.unwrap();
    assert!(a.settled());
    assert_eq!(a.pass_interval(false, false, &watch), failover * SETTLED_PASS_EVERY);
    assert_eq!(a.pass_interval(true, false, &watch), poll_interval(failover), "short of its share: every read interval");
    // An owner without a heartbeat row (Java KCL, or a worker that died):
    // its lease may expire or be stolen back, which no heartbeat announces.
    // Its expiry shows only in a scan: passes come every quarter failover time.
    a.set_fleet(Fleet { live: ["a".to_owned()].into(), dead: Default::default() });
    a.take_pass().await.unwrap();
    assert!(!a.settled());
    assert_eq!(a.pass_interval(false, false, &watch), failover / 4);
}

#[tokio::test]
async fn a_per_lease_worker_looks_for_a_java_kcl_3_worker_until_the_table_has_3x_rows() {
    let store = table(&["s0", "s1"]).await;
    let heartbeat = Coordinator::new(store.clone(), "a", TakeSettings::default());
    assert_eq!(heartbeat.kcl3_probe_interval(), None, "heartbeat mode: Java KCL cannot share the table");
    let settings = TakeSettings { heartbeat_leases: false, ..TakeSettings::default() };
    let failover = settings.failover_time;
    let mut per_lease = Coordinator::new(store.clone(), "b", settings);
    per_lease.take_pass().await.unwrap();
    assert_eq!(per_lease.kcl3_probe_interval(), Some(failover / 2), "no 3.x rows yet: a joining 3.x worker shows only in a scan");
    store.add_kcl3_worker("java-1");
    per_lease.take_pass().await.unwrap();
    assert_eq!(per_lease.kcl3_probe_interval(), None, "3.x rows: no more looking...");
    assert_eq!(per_lease.pass_interval(false, false, &FleetWatch::new("b", failover)), failover, "...the table is scanned every failover time instead");
}
