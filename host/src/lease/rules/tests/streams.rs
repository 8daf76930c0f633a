//! The rules in a multi-stream table: shares of each stream, and swaps.

use super::super::plan::pick_release;
use super::*;
use std::collections::BTreeMap;

#[test]
fn a_worker_takes_and_gives_back_its_share_of_each_stream() {
    // Two streams of four shards; w2 holds two of `a`'s and is at its
    // target of 4 of 8: w1's share is the other two of `a` and two of `b`.
    let key = |stream: &str, i: usize| format!("1:{stream}:7:shardId-{i}");
    let mut leases: Vec<Lease> = (0..4).flat_map(|i| [lease(&key("a", i), None), lease(&key("b", i), None)]).collect();
    leases[0].owner = Some("w2".into());
    leases[2].owner = Some("w2".into());
    let held = [key("b", 0), key("b", 1)];
    let held: Vec<&str> = held.iter().map(String::as_str).collect();
    let taken = plan_in(&leases, "w1", &held, &fleet(&["w2"], &[])).take;
    let of = |stream: &str| taken.iter().filter(|l| l.key.stream_part() == Some(&format!("1:{stream}:7"))).count();
    assert_eq!((of("a"), of("b")), (2, 0), "holding two of b, w1 takes a's first: {:?}", keys(&taken));

    // Holding three of `a` and one of `b`, giving back two leaves one of each... then two and one.
    let mine = vec![LeaseKey::from(key("a", 0)), LeaseKey::from(key("a", 1)), LeaseKey::from(key("a", 2)), LeaseKey::from(key("b", 3))];
    let given = pick_release(mine.clone(), 2, &[]);
    assert_eq!(given, [LeaseKey::from(key("a", 2)), LeaseKey::from(key("a", 1))], "from the stream held most, highest key first");
    let given = pick_release(mine.clone(), 3, &[]);
    assert_eq!(given.iter().filter(|k| k.as_str().contains(":b:")).count(), 1, "{given:?}");
    // For a short worker that holds as many of `a` already, `b` first.
    let short = [BTreeMap::from([("1:a:7", 3)])];
    assert_eq!(pick_release(mine, 1, &short), [LeaseKey::from(key("b", 3))]);
    // One stream: the highest keys, as before streams.
    assert_eq!(pick_release(vec!["s1".into(), "s3".into(), "s2".into()], 2, &[]), [LeaseKey::from("s3"), LeaseKey::from("s2")]);
}

#[test]
fn a_live_workers_lease_of_a_stream_this_worker_does_not_read_counts_toward_the_shares_and_is_never_taken() {
    // Mid-roll: w1 reads a, b and c; w2 (not yet restarted) reads a and b.
    // w2 sees c's leases, held by w1, in its share: 6 leases, 3 each.
    let key = |stream: &str, i: usize| format!("1:{stream}:7:shardId-{i}");
    let mut leases = vec![lease(&key("a", 0), Some("w2")), lease(&key("b", 0), Some("w2")), lease(&key("a", 1), None)];
    leases.extend([lease(&key("b", 1), Some("w1")), lease(&key("c", 0), Some("w1")), lease(&key("c", 1), Some("w1"))]);
    leases.push(lease(&key("gone", 0), None));
    let scope = |k: &LeaseKey| !k.as_str().contains(":c:") && !k.as_str().contains(":gone:");
    let held: HashSet<LeaseKey> = [key("a", 0), key("b", 0)].into_iter().map(LeaseKey::from).collect();
    let mut tracker = ExpiryTracker::default();
    let now = Instant::now();
    tracker.observe_leases(&leases, now);
    let live = fleet(&["w1", "w2"], &[]);
    let view = View {
        me: "w2", held: &held, releasing: &HashSet::new(), fleet: &live, kcl3_workers: &NO_KCL3, tracker: &tracker, now,
        cover: false, fleet_read_sent: None, scope: Some(&scope),
    };
    let plan = plan_take(&leases, &view, &TakeSettings::default(), &mut fastrand::Rng::with_seed(7));
    assert_eq!(keys(&plan.take), BTreeSet::from([key("a", 1).as_str()]), "its third, not the removed stream's free lease");
    assert!(plan.steal.is_empty());
}

#[test]
fn two_workers_each_holding_two_more_of_a_stream_swap_one_lease_and_then_keep_still() {
    // After a rolling restart: three streams of two shards, three leases
    // each, but w1 holds both of `c` and w2 both of `a`.
    let key = |stream: &str, i: usize| format!("1:{stream}:7:shardId-{i}");
    let owners = [("a", 0, "w2"), ("a", 1, "w2"), ("b", 0, "w1"), ("b", 1, "w2"), ("c", 0, "w1"), ("c", 1, "w1")];
    let mut leases: Vec<Lease> = owners.iter().map(|(s, i, w)| kcl_host_lease(&key(s, *i), w)).collect();
    let both = fleet(&["w1", "w2"], &[]);
    let swap = |leases: &[Lease], me| judge(leases, me, &[], &both, &NO_KCL3, |l, v, s| plan_swap(l, v, s, &|_, _| true));
    assert_eq!(swap(&leases, "w1"), Some(LeaseKey::from(key("c", 1))), "w1 gives back its higher `c`");
    assert_eq!(swap(&leases, "w2"), Some(LeaseKey::from(key("a", 1))), "and w2 would give back an `a` as well");
    let reads_no_c = |worker: &str, stream: &str| worker != "w2" || stream != "1:c:7";
    let unread = judge(&leases, "w1", &[], &both, &NO_KCL3, |l, v, s| plan_swap(l, v, s, &reads_no_c));
    assert_eq!(unread, None, "not while w2's heartbeat lists no `c`");

    // w1 gives `c` 1 back; w2, at the target, takes it above the target...
    leases[5].owner = None;
    let held = |leases: &[Lease], me| leases.iter().filter(|l| l.is_owned_by(me)).map(|l| l.key.to_string()).collect::<Vec<_>>();
    let w2_held = held(&leases, "w2");
    let taken = plan_in(&leases, "w2", &w2_held.iter().map(String::as_str).collect::<Vec<_>>(), &both).take;
    assert_eq!(keys(&taken), BTreeSet::from([key("c", 1).as_str()]));
    leases[5] = kcl_host_lease(&key("c", 1), "w2");
    assert_eq!(swap(&leases, "w1"), None, "w1 is short now: no second swap while one is under way");
    // ... and gives back an `a`, the stream w1 lacks, which w1 takes.
    let given = judge(&leases, "w2", &[], &both, &NO_KCL3, plan_release);
    assert_eq!(given, [LeaseKey::from(key("a", 1))]);
    leases[1].owner = None;
    let w1_held = held(&leases, "w1");
    let taken = plan_in(&leases, "w1", &w1_held.iter().map(String::as_str).collect::<Vec<_>>(), &both).take;
    assert_eq!(keys(&taken), BTreeSet::from([key("a", 1).as_str()]));
    leases[1] = kcl_host_lease(&key("a", 1), "w1");

    for me in ["w1", "w2"] {
        let mine: BTreeSet<_> = held(&leases, me).iter().map(|k| k.split(':').nth(1).unwrap().to_owned()).collect();
        assert_eq!(mine.len(), 3, "{me} holds one lease of each stream");
        assert_eq!(swap(&leases, me), None, "balanced: nothing moves");
        assert!(plan_in(&leases, me, &held(&leases, me).iter().map(String::as_str).collect::<Vec<_>>(), &both).take.is_empty());
    }
}

#[test]
fn a_table_of_one_stream_never_swaps() {
    // w1 holds three, w2 one and a free lease waits: counts, not swaps, move it.
    let mut leases: Vec<Lease> = (0..3).map(|i| kcl_host_lease(&format!("s{i}"), "w1")).collect();
    leases.push(kcl_host_lease("s3", "w2"));
    let both = fleet(&["w1", "w2"], &[]);
    assert_eq!(judge(&leases, "w1", &[], &both, &NO_KCL3, |l, v, s| plan_swap(l, v, s, &|_, _| true)), None);
    leases.push(lease("s4", None));
    let taken = plan_in(&leases, "w1", &["s0", "s1", "s2"], &both).take;
    assert!(taken.is_empty(), "w1 is at the target: the free lease is w2's to take");
}
