//! Property tests of the lease rules: many workers on one in-memory table,
//! with a virtual clock, random crashes, new workers and random reshards.
//!
//! Each simulated worker does what the coordinator does — renew every step,
//! a take pass every few steps through [`plan_take`] — and processes its
//! ready leases, finishing closed shards at random. Checked throughout:
//! - no shard is held (validly) by two live workers at once;
//! - no lease is taken while a parent is unfinished;
//! - no lease at `SHARD_END` is taken again.
//! Checked after a quiet period: every ready shard is held, and once the
//! load is balanced no lease changes hands.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::memory::MemoryStore;
use super::rules::{is_ready, plan_take, ExpiryTracker, TakeSettings};
use super::{Checkpoint, Lease, LeaseStore};

const STEP: Duration = Duration::from_secs(1);
const TAKE_EVERY: u64 = 3;

struct Worker {
    id: String,
    tracker: ExpiryTracker,
    /// Held leases: until when each is valid (last write + failover time),
    /// and from when it may be delivered (a stolen one waits a failover time).
    held: HashMap<String, (Instant, Instant)>,
    rng: fastrand::Rng,
}

#[derive(Clone, Debug)]
enum Event {
    Step,
    Crash(usize),
    Join,
    Split(usize),
    Merge(usize),
    Finish(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => Just(Event::Step),
        1 => any::<usize>().prop_map(Event::Crash),
        1 => Just(Event::Join),
        1 => any::<usize>().prop_map(Event::Split),
        1 => any::<usize>().prop_map(Event::Merge),
        2 => any::<usize>().prop_map(Event::Finish),
    ]
}

struct Sim {
    store: MemoryStore,
    settings: TakeSettings,
    workers: Vec<Worker>,
    /// Open leaf shards (no children yet).
    open: Vec<String>,
    /// Shards that were split or merged: processing them can reach the end.
    closed: HashSet<String>,
    next_shard: usize,
    next_worker: usize,
    now: Instant,
    tick: u64,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
}

impl Sim {
    fn new(shards: usize, workers: usize, seed: u64) -> Self {
        let mut sim = Sim {
            store: MemoryStore::default(),
            settings: TakeSettings { failover_time: Duration::from_secs(10), max_leases: usize::MAX, max_leases_to_steal: 1 },
            workers: Vec::new(),
            open: Vec::new(),
            closed: HashSet::new(),
            next_shard: 0,
            next_worker: 0,
            now: Instant::now(),
            tick: 0,
        };
        for _ in 0..shards {
            sim.new_shard(BTreeSet::new());
        }
        for i in 0..workers {
            sim.join(seed + i as u64);
        }
        sim
    }

    fn new_shard(&mut self, parents: BTreeSet<String>) -> String {
        let key = format!("shard-{:04}", self.next_shard);
        self.next_shard += 1;
        assert!(block_on(self.store.create(&Lease::new(&key, Checkpoint::TrimHorizon, parents))).unwrap());
        self.open.push(key.clone());
        key
    }

    fn join(&mut self, seed: u64) {
        self.workers.push(Worker {
            id: format!("w{}", self.next_worker),
            tracker: ExpiryTracker::default(),
            held: HashMap::new(),
            rng: fastrand::Rng::with_seed(seed),
        });
        self.next_worker += 1;
    }

    fn leases(&self) -> Vec<Lease> {
        block_on(self.store.list()).unwrap()
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Step => self.step(),
            Event::Crash(i) if self.workers.len() > 1 => {
                self.workers.remove(i % self.workers.len());
            }
            Event::Join => self.join(self.next_worker as u64 * 31),
            Event::Split(i) if !self.open.is_empty() && self.open.len() < 24 => {
                let parent = self.open.remove(i % self.open.len());
                self.closed.insert(parent.clone());
                let parents = BTreeSet::from([parent]);
                self.new_shard(parents.clone());
                self.new_shard(parents);
            }
            Event::Merge(i) if self.open.len() >= 2 => {
                let a = self.open.remove(i % self.open.len());
                let b = self.open.remove(i % self.open.len());
                self.closed.insert(a.clone());
                self.closed.insert(b.clone());
                self.new_shard(BTreeSet::from([a, b]));
            }
            Event::Finish(i) => self.finish(i),
            _ => {}
        }
    }

    /// A worker reaches the end of a closed shard it holds and writes SHARD_END.
    fn finish(&mut self, pick: usize) {
        let leases = self.leases();
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        let candidates: Vec<(usize, &Lease)> = self
            .workers
            .iter()
            .enumerate()
            .flat_map(|(w, worker)| worker.held.iter().map(move |(k, times)| (w, k, times)))
            // Only a worker that may deliver gets to the end. (A stale holder's
            // write would be refused: the counter changed when it lost the lease.)
            .filter(|(_, k, (valid_until, deliver_after))| {
                self.closed.contains(*k) && *valid_until > self.now && *deliver_after <= self.now
            })
            .filter_map(|(w, k, _)| by_key.get(k.as_str()).map(|l| (w, *l)))
            .filter(|(w, l)| l.is_owned_by(&self.workers[*w].id))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let (w, lease) = candidates[pick % candidates.len()];
        assert!(is_ready(lease, &by_key), "{} processed {} before its parents ended", self.workers[w].id, lease.key);
        if block_on(self.store.checkpoint(lease, &Checkpoint::ShardEnd, &BTreeSet::new())).unwrap().is_some() {
            self.workers[w].held.remove(&lease.key);
        }
    }

    fn step(&mut self) {
        self.now += STEP;
        self.tick += 1;
        let failover = self.settings.failover_time;
        for i in 0..self.workers.len() {
            // Renew: a failed conditional write means the lease is lost.
            let held: Vec<String> = self.workers[i].held.keys().cloned().collect();
            for key in held {
                let current = self.store.get(&key).unwrap();
                let renewed = current.is_owned_by(&self.workers[i].id)
                    && block_on(self.store.renew(&current)).unwrap().is_some();
                if renewed {
                    self.workers[i].held.get_mut(&key).unwrap().0 = self.now + failover;
                } else {
                    self.workers[i].held.remove(&key);
                }
            }
            if self.tick % TAKE_EVERY == i as u64 % TAKE_EVERY {
                self.take_pass(i);
            }
        }
        self.check_exclusive();
    }

    fn take_pass(&mut self, i: usize) {
        let leases = self.leases();
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        let worker = &mut self.workers[i];
        worker.tracker.observe(&leases, self.now);
        let held: HashSet<String> = worker.held.keys().cloned().collect();
        let plan = plan_take(&leases, &worker.id, &held, &worker.tracker, self.now, &self.settings, &mut worker.rng);
        let stolen: HashSet<&str> = plan.steal.iter().map(|l| l.key.as_str()).collect();
        for lease in plan.take.iter().chain(&plan.steal) {
            assert!(!lease.is_finished(), "{} tried to take {} at SHARD_END", worker.id, lease.key);
            assert!(is_ready(lease, &by_key), "{} tried to take {} before its parents ended", worker.id, lease.key);
            if block_on(self.store.take(lease, &worker.id)).unwrap().is_some() {
                let failover = self.settings.failover_time;
                let deliver_after = if stolen.contains(lease.key.as_str()) { self.now + failover } else { self.now };
                worker.held.insert(lease.key.clone(), (self.now + failover, deliver_after));
            }
        }
    }

    /// No lease is delivered by two workers at once.
    fn check_exclusive(&self) {
        let mut holders: HashMap<&str, Vec<&str>> = HashMap::new();
        for worker in &self.workers {
            for (key, (valid_until, deliver_after)) in &worker.held {
                if *valid_until > self.now && *deliver_after <= self.now {
                    holders.entry(key).or_default().push(&worker.id);
                }
            }
        }
        for (key, workers) in holders {
            assert!(workers.len() <= 1, "{key} held by {workers:?} at once");
        }
    }

    fn owners(&self) -> Vec<(String, Option<String>)> {
        self.leases().into_iter().map(|l| (l.key, l.owner)).collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn lease_rules_hold_under_crashes_and_reshards(
        shards in 1usize..12,
        workers in 1usize..6,
        seed in any::<u64>(),
        events in prop::collection::vec(event(), 0..120),
    ) {
        let mut sim = Sim::new(shards, workers, seed);
        for event in events {
            sim.apply(event);
        }
        // Quiet: no crashes, reshards or shard ends. Dead workers' leases
        // expire, free ones are taken, the load balances.
        for _ in 0..60 {
            sim.step();
        }
        let leases = sim.leases();
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        let live: HashSet<&str> = sim.workers.iter().map(|w| w.id.as_str()).collect();
        for lease in leases.iter().filter(|l| is_ready(l, &by_key)) {
            let owner = lease.owner.as_deref();
            prop_assert!(owner.is_some_and(|o| live.contains(o)), "{} is ready but held by {:?}", lease.key, owner);
        }
        let balanced = sim.owners();
        for _ in 0..30 {
            sim.step();
        }
        prop_assert_eq!(sim.owners(), balanced, "leases changed hands after balancing");
    }
}
