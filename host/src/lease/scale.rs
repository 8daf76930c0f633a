//! The real [`Coordinator`] at fleet scale, on tokio's paused clock: 10,000
//! leases and 200 kcl-host workers on one in-memory table, each worker on
//! the worker loop's own rhythm (a heartbeat and a renewal round every third
//! of the failover time; heartbeat reads every 500 ms by the two watchers
//! and every 5 s by the others, as [`FleetWatch`] decides; a take pass
//! as [`Coordinator::pass_interval`] says, at once when the fleet changes, every tick
//! while short of the target and a read interval later while above it).
//! For each renewal mode it measures the lease table's requests per
//! lease-minute (and the control table's, from the same rhythm), the time
//! to balance after 20 workers join, and after 20 are killed the time until
//! their leases are held again and until the fleet is balanced; it checks
//! throughout that no shard is delivered by two workers at once; once
//! balanced, that every lease is held with a consumer and that nothing
//! changes hands.
//!
//! Run with `cargo test -p kcl-host --release --lib lease::scale -- --ignored --nocapture`;
//! figures go in docs/BENCHMARKS.md. A fleet of 1,000 leases and 40
//! workers runs the same checks in every test run.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::coordinator::{Coordinator, HeldLease};
use super::memory::MemoryStore;
use super::rules::TakeSettings;
use super::{Checkpoint, Lease, LeaseKey, LeaseStore};
use super::heartbeat::Heartbeat;
use super::watch::FleetWatch;

/// A fleet's size: its leases and workers, and how many join and die.
#[derive(Clone, Copy)]
struct Size {
    leases: usize,
    workers: usize,
    changed: usize,
}

/// The fleet: 10,000 leases, 200 workers, 20 joining and 20 killed.
const LARGE: Size = Size { leases: 10_000, workers: 200, changed: 20 };
/// A tenth of its leases and a fifth of its workers, for every test run.
const SMALL: Size = Size { leases: 1_000, workers: 40, changed: 4 };
const FAILOVER: Duration = Duration::from_secs(10);
/// The heartbeat-read interval: one tick.
const TICK: Duration = Duration::from_millis(500);
/// A heartbeat and a renewal round every third of the failover time.
const BEAT_TICKS: u64 = 7;
/// Rows of about 250 bytes: a scan of `leases` is this many 1 MB pages.
fn scan_pages(leases: usize) -> u64 {
    (leases as u64 * 250).div_ceil(1 << 20)
}

struct Member {
    id: String,
    coordinator: Coordinator<MemoryStore>,
    watch: FleetWatch,
    consumers: HashMap<LeaseKey, Arc<HeldLease<MemoryStore>>>,
    /// Staggers the member's rhythm against the others'.
    offset: u64,
    next_read: Instant,
    next_pass: Instant,
}

struct Fleet {
    size: Size,
    store: Arc<MemoryStore>,
    settings: TakeSettings,
    members: Vec<Member>,
    heartbeats: HashMap<String, u64>,
    next_worker: usize,
    tick: u64,
    /// Control-table requests: heartbeat writes and heartbeat reads.
    beats_written: u64,
    beat_reads: u64,
}

impl Fleet {
    async fn new(size: Size, heartbeat_leases: bool) -> Self {
        let store = Arc::new(MemoryStore::default());
        for i in 0..size.leases {
            store.create(&Lease::new(format!("shard-{i:05}"), Checkpoint::TrimHorizon, Default::default())).await.unwrap();
        }
        let settings = TakeSettings { failover_time: FAILOVER, heartbeat_leases, ..TakeSettings::default() };
        let mut fleet = Fleet { size, store, settings, members: Vec::new(), heartbeats: HashMap::new(), next_worker: 0, tick: 0, beats_written: 0, beat_reads: 0 };
        for _ in 0..size.workers {
            fleet.join();
        }
        fleet
    }

    fn join(&mut self) {
        let id = format!("w{:03}", self.next_worker);
        self.next_worker += 1;
        let coordinator = Coordinator::new(self.store.clone(), id.clone(), self.settings.clone());
        // The worker loop writes the first heartbeat before it takes anything.
        let counter = self.heartbeats.entry(id.clone()).or_default();
        *counter += 1;
        coordinator.cover().heartbeat_written(Instant::now(), *counter);
        let watch = FleetWatch::new(id.clone(), FAILOVER);
        let offset = fastrand::u64(..BEAT_TICKS);
        let now = Instant::now();
        self.members.push(Member { id, coordinator, watch, consumers: HashMap::new(), offset, next_read: now, next_pass: now });
    }

    /// kill -9 of `n` workers, the watcher (the lowest id) first, so its
    /// deputy covers: nothing given back, the heartbeat rows stay.
    fn kill(&mut self, n: usize) -> Vec<String> {
        let watcher = (0..self.members.len()).min_by_key(|i| self.members[*i].id.clone()).expect("members");
        let mut killed = vec![self.members.remove(watcher).id];
        killed.extend((1..n).map(|_| self.members.remove(fastrand::usize(..self.members.len())).id));
        killed
    }

    async fn step(&mut self) {
        tokio::time::advance(TICK).await;
        self.tick += 1;
        let now = Instant::now();
        let beats: Vec<Heartbeat> = self
            .heartbeats
            .iter()
            .map(|(w, n)| Heartbeat::bare(w.clone(), *n))
            .collect();
        for member in &mut self.members {
            let rhythm = self.tick + member.offset;
            if rhythm.is_multiple_of(BEAT_TICKS) {
                let counter = self.heartbeats.get_mut(&member.id).expect("a live member's row");
                *counter += 1;
                self.beats_written += 1;
                member.coordinator.cover().heartbeat_written(now, *counter);
                for lost in member.coordinator.renewer(FAILOVER / 3).renew_all().await {
                    if member.consumers.get(lost.key()).is_some_and(|c| c.id() == lost.id()) {
                        member.consumers.remove(lost.key());
                    }
                }
            }
            let mut changed = false;
            if member.next_read <= now {
                self.beat_reads += 1;
                changed = member.coordinator.follow_fleet(&mut member.watch, &beats, now, now).is_change();
                member.next_read = member.watch.next_read(now);
            }
            let expiring = member.coordinator.expiry_due().is_some_and(|due| due <= now);
            if changed || expiring || member.next_pass <= now {
                let pass = member.coordinator.take_pass().await.unwrap();
                member.next_pass = now + member.coordinator.pass_interval(pass.short, pass.above, &member.watch);
                for key in pass.release {
                    member.consumers.remove(&key);
                    member.coordinator.evict(&key).await.unwrap();
                }
                for held in pass.taken {
                    member.consumers.insert(held.key().to_owned(), held);
                }
            }
        }
        self.check_exclusive();
    }

    /// No shard is delivered by two workers at once.
    fn check_exclusive(&self) {
        let now = Instant::now();
        let mut holder: HashMap<&str, &str> = HashMap::new();
        for member in &self.members {
            for held in member.consumers.values().filter(|h| h.is_valid() && h.deliver_after() <= now) {
                if let Some(other) = holder.insert(held.key(), &member.id) {
                    panic!("{} delivered by {other} and {} at once", held.key(), member.id);
                }
            }
        }
    }

    /// Whether every lease is held by a live member running a consumer for it.
    async fn held(&self) -> bool {
        let owners: HashMap<&str, &Member> = self.members.iter().map(|m| (m.id.as_str(), m)).collect();
        let leases = self.store.list().await.unwrap();
        leases.iter().all(|l| {
            l.owner.as_deref().and_then(|o| owners.get(o)).is_some_and(|m| m.consumers.get(&l.key).is_some_and(|c| c.is_valid()))
        })
    }

    /// Whether every lease is held, and no member holds more than its share.
    async fn balanced(&self) -> bool {
        let share = self.size.leases.div_ceil(self.members.len());
        self.held().await && self.members.iter().all(|m| m.consumers.len() <= share)
    }

    /// Steps until [`Self::held`] (`balanced` false) or [`Self::balanced`];
    /// the virtual time it took.
    async fn until(&mut self, balanced: bool, limit: Duration) -> Duration {
        let started = Instant::now();
        while !(if balanced { self.balanced().await } else { self.held().await }) {
            assert!(started.elapsed() < limit, "not {} after {limit:?}", if balanced { "balanced" } else { "held" });
            self.step().await;
        }
        started.elapsed()
    }

    async fn owners(&self) -> Vec<Option<String>> {
        self.store.list().await.unwrap().into_iter().map(|l| l.owner).collect()
    }
}

/// One fleet size and renewal mode: start, steady state, joins, kills; the
/// figures as a line.
async fn measure(size: Size, heartbeat_leases: bool) -> String {
    let mut fleet = Fleet::new(size, heartbeat_leases).await;
    let start = fleet.until(true, Duration::from_secs(300)).await;

    // Two minutes of steady state: requests, and no lease changes hands.
    let before = fleet.store.requests();
    let (beats, reads) = (fleet.beats_written, fleet.beat_reads);
    let owners = fleet.owners().await;
    let steady = Duration::from_secs(120);
    for _ in 0..steady.as_millis() / TICK.as_millis() {
        fleet.step().await;
    }
    assert_eq!(fleet.owners().await, owners, "leases changed hands in a steady fleet");
    let lease_minutes = size.leases as f64 * steady.as_secs_f64() / 60.0;
    let mut per_op: BTreeMap<String, f64> = BTreeMap::new();
    for (op, n) in fleet.store.requests() {
        let n = n - before.get(op).copied().unwrap_or(0);
        let n = if op == "scan" { n * scan_pages(size.leases) } else { n };
        per_op.insert(format!("lease {op}"), n as f64 / lease_minutes);
    }
    per_op.insert("heartbeat write".into(), (fleet.beats_written - beats) as f64 / lease_minutes);
    per_op.insert("heartbeat read".into(), (fleet.beat_reads - reads) as f64 / lease_minutes);
    let total: f64 = per_op.values().sum();

    for _ in 0..size.changed {
        fleet.join();
    }
    let joined = fleet.until(true, Duration::from_secs(600)).await;
    let killed = fleet.kill(size.changed);
    let held_again = fleet.until(false, Duration::from_secs(600)).await;
    let after_kill = held_again + fleet.until(true, Duration::from_secs(600)).await;
    let leases = fleet.store.list().await.unwrap();
    assert!(leases.iter().all(|l| l.owner.as_ref().is_none_or(|o| !killed.contains(o))), "a killed worker still owns a lease");

    let ops: Vec<String> = per_op.iter().filter(|(_, v)| **v > 0.0).map(|(op, v)| format!("{op} {v:.3}")).collect();
    format!(
        "{} leases, {} workers, {}: start -> balanced {:.1} s; steady: {total:.2} requests per lease-minute ({}), 0 leases moved in {} s; \
         {n} join -> balanced {:.1} s; {n} killed (the watcher among them: {}) -> their leases held {:.1} s, balanced {:.1} s",
        size.leases,
        size.workers,
        if heartbeat_leases { "heartbeat leases" } else { "per-lease renewals" },
        start.as_secs_f64(),
        ops.join(", "),
        steady.as_secs(),
        joined.as_secs_f64(),
        killed.join(" "),
        held_again.as_secs_f64(),
        after_kill.as_secs_f64(),
        n = size.changed,
    )
}

/// Runs `measure` on tokio's paused clock.
fn simulate(size: Size, heartbeat_leases: bool) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(measure(size, heartbeat_leases))
}

#[test]
#[ignore = "minutes in a debug build: run with --release (see the module's doc)"]
fn ten_thousand_leases_and_two_hundred_workers_in_both_renewal_modes() {
    for heartbeat_leases in [true, false] {
        println!("{}", simulate(LARGE, heartbeat_leases));
    }
}

/// The same checks on a smaller fleet in every test run: the watchers
/// cover (its 38 other workers read every 4 s), nothing is delivered twice
/// at once, and nothing moves once balanced.
#[test]
fn a_thousand_leases_and_forty_workers_keep_the_rules() {
    println!("{}", simulate(SMALL, true));
}
