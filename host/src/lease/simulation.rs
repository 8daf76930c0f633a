//! Property tests of the real [`Coordinator`] and [`HeldLease`]: many
//! workers on one in-memory table, on tokio's paused clock (a virtual
//! clock), with random crashes, graceful stops, new workers, reshards, shard
//! ends, consumers that stop on their own and heartbeats that stop being
//! written while lease renewals still work.
//!
//! Each simulated worker is a `Coordinator` plus the consumers the worker
//! loop would run: one per lease a take pass returns, dropped when the
//! renewal reports the lease lost or a pass gives the lease back. In the
//! mixed fleet two workers in three keep a heartbeat (and watch the
//! others') and renew each lease; the third kind does not, as a Java KCL
//! worker would not. In the kcl-host fleet every worker heartbeats, and the
//! heartbeat renews the leases. Checked throughout:
//! - no shard is delivered by two workers at once (valid and past
//!   `deliver_after` on both);
//! - no lease is taken while a parent is unfinished, none at `SHARD_END`.
//!
//! Checked after a quiet period: every ready shard is held by a live worker
//! *that runs a consumer for it* (a lease is never held and idle), and once
//! balanced no lease changes hands.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::heartbeat::Heartbeat;
use super::watch::{FleetWatch, DEFAULT_FLEET_READS_PER_SECOND};
use super::coordinator::{Coordinator, HeldLease};
use super::memory::MemoryStore;
use super::rules::{is_ready, TakeSettings};
use super::{Checkpoint, Lease, LeaseKey, LeaseStore};

const STEP: Duration = Duration::from_secs(1);
const TAKE_EVERY: u64 = 3;

struct Worker {
    id: String,
    coordinator: Coordinator<MemoryStore>,
    /// The consumers the worker loop runs: one per lease it was given.
    consumers: HashMap<LeaseKey, Arc<HeldLease<MemoryStore>>>,
    /// The fleet as this worker's heartbeat reads show it; `None` for a
    /// worker without a heartbeat.
    watch: Option<FleetWatch>,
    /// Whether its heartbeat writes still succeed.
    beating: bool,
    /// When it reads the heartbeats next.
    next_read: tokio::time::Instant,
}

#[derive(Clone, Debug)]
enum Event {
    Step,
    Crash(usize),
    /// Gives every lease back and deletes its heartbeat row, then exits.
    Stop(usize),
    /// Heartbeat writes fail from now on; lease renewals still succeed.
    HeartbeatFails(usize),
    Join,
    Split(usize),
    Merge(usize),
    Finish(usize),
    /// A consumer ends without finishing its shard (its validity ran out
    /// before a renewal noticed).
    ConsumerStops(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => Just(Event::Step),
        1 => any::<usize>().prop_map(Event::Crash),
        1 => any::<usize>().prop_map(Event::Stop),
        1 => any::<usize>().prop_map(Event::HeartbeatFails),
        1 => Just(Event::Join),
        1 => any::<usize>().prop_map(Event::Split),
        1 => any::<usize>().prop_map(Event::Merge),
        2 => any::<usize>().prop_map(Event::Finish),
        1 => any::<usize>().prop_map(Event::ConsumerStops),
    ]
}

struct Sim {
    store: Arc<MemoryStore>,
    settings: TakeSettings,
    workers: Vec<Worker>,
    /// The heartbeat rows of the control table.
    heartbeats: HashMap<String, u64>,
    /// Open leaf shards (no children yet).
    open: Vec<String>,
    /// Shards that were split or merged: processing them can reach the end.
    closed: HashSet<String>,
    next_shard: usize,
    next_worker: usize,
    tick: u64,
    /// Whether every third worker keeps no heartbeat, as a Java KCL worker
    /// would not (the others then renew each lease: `--lease-renewal
    /// per-lease`); otherwise every worker heartbeats and the heartbeat
    /// renews the leases.
    mixed: bool,
}

impl Sim {
    async fn new(shards: usize, workers: usize, mixed: bool) -> Self {
        let mut sim = Sim {
            store: Arc::new(MemoryStore::default()),
            settings: TakeSettings { failover_time: Duration::from_secs(10), heartbeat_leases: !mixed, ..TakeSettings::default() },
            mixed,
            workers: Vec::new(),
            heartbeats: HashMap::new(),
            open: Vec::new(),
            closed: HashSet::new(),
            next_shard: 0,
            next_worker: 0,
            tick: 0,
        };
        for _ in 0..shards {
            sim.new_shard(BTreeSet::new()).await;
        }
        for _ in 0..workers {
            sim.join();
        }
        sim
    }

    async fn new_shard(&mut self, parents: BTreeSet<String>) {
        let key = format!("shard-{:04}", self.next_shard);
        self.next_shard += 1;
        assert!(self.store.create(&Lease::new(&key, Checkpoint::TrimHorizon, parents)).await.unwrap());
        self.open.push(key);
    }

    fn join(&mut self) {
        let id = format!("w{}", self.next_worker);
        self.next_worker += 1;
        let coordinator = Coordinator::new(self.store.clone(), id.clone(), self.settings.clone());
        // The kcl-host fleet reads the heartbeats seldom (one read a second
        // between the workers other than the watchers), so the watchers cover
        // for workers that die or stop.
        let reads = if self.mixed { DEFAULT_FLEET_READS_PER_SECOND } else { 1 };
        let watch = (!self.mixed || !self.next_worker.is_multiple_of(3))
            .then(|| FleetWatch::new(id.clone(), self.settings.failover_time).with_fleet_reads(reads));
        if watch.is_some() {
            // The worker loop writes the first heartbeat before it takes anything.
            let counter = self.heartbeats.entry(id.clone()).or_default();
            *counter += 1;
            coordinator.cover().heartbeat_written(tokio::time::Instant::now(), *counter);
        }
        self.workers.push(Worker { id, coordinator, consumers: HashMap::new(), watch, beating: true, next_read: tokio::time::Instant::now() });
    }

    /// A graceful stop, as the worker loop does it: consumers stop, every
    /// lease goes back, the heartbeat row goes.
    async fn stop(&mut self, pick: usize) {
        let mut worker = self.workers.remove(pick % self.workers.len());
        for key in worker.consumers.keys() {
            worker.coordinator.evict(key).await.unwrap();
        }
        self.heartbeats.remove(&worker.id);
    }

    async fn leases(&self) -> Vec<Lease> {
        self.store.list().await.unwrap()
    }

    async fn apply(&mut self, event: Event) {
        match event {
            Event::Step => self.step().await,
            Event::Crash(i) if self.workers.len() > 1 => {
                self.workers.remove(i % self.workers.len());
            }
            Event::Stop(i) if self.workers.len() > 1 => self.stop(i).await,
            Event::HeartbeatFails(i) if self.workers.len() > 1 => {
                let n = self.workers.len();
                self.workers[i % n].beating = false;
            }
            Event::Join => self.join(),
            Event::Split(i) if !self.open.is_empty() && self.open.len() < 24 => {
                let parent = self.open.remove(i % self.open.len());
                self.closed.insert(parent.clone());
                let parents = BTreeSet::from([parent]);
                self.new_shard(parents.clone()).await;
                self.new_shard(parents).await;
            }
            Event::Merge(i) if self.open.len() >= 2 => {
                let a = self.open.remove(i % self.open.len());
                let b = self.open.remove(i % self.open.len());
                self.closed.insert(a.clone());
                self.closed.insert(b.clone());
                self.new_shard(BTreeSet::from([a, b])).await;
            }
            Event::Finish(i) => self.finish(i).await,
            Event::ConsumerStops(i) => self.consumer_stops(i),
            _ => {}
        }
    }

    /// Consumers that may deliver now, as (worker index, lease).
    fn delivering(&self) -> Vec<(usize, Arc<HeldLease<MemoryStore>>)> {
        let now = tokio::time::Instant::now();
        self.workers
            .iter()
            .enumerate()
            .flat_map(|(w, worker)| worker.consumers.values().map(move |held| (w, held.clone())))
            .filter(|(_, held)| held.is_valid() && held.deliver_after() <= now)
            .collect()
    }

    /// A consumer reaches the end of a closed shard and writes SHARD_END, as
    /// the worker does (through the held lease: fenced).
    async fn finish(&mut self, pick: usize) {
        let candidates: Vec<_> = self.delivering().into_iter().filter(|(_, held)| self.closed.contains(held.key().as_str())).collect();
        if candidates.is_empty() {
            return;
        }
        let (w, held) = candidates[pick % candidates.len()].clone();
        let leases = self.leases().await;
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        let lease = by_key[held.key().as_str()];
        assert!(is_ready(lease, &by_key), "{} processed {} before its parents ended", self.workers[w].id, lease.key);
        if held.checkpoint(Checkpoint::ShardEnd, &BTreeSet::new()).await.is_ok() {
            let worker = &mut self.workers[w];
            worker.coordinator.finished(held.key());
            worker.consumers.remove(held.key());
        }
    }

    fn consumer_stops(&mut self, pick: usize) {
        let all: Vec<(usize, LeaseKey)> =
            self.workers.iter().enumerate().flat_map(|(w, worker)| worker.consumers.keys().map(move |k| (w, k.clone()))).collect();
        if all.is_empty() {
            return;
        }
        let (w, key) = &all[pick % all.len()];
        let worker = &mut self.workers[*w];
        let held = worker.consumers.remove(key).expect("listed");
        worker.coordinator.consumer_ended(&held);
    }

    async fn step(&mut self) {
        tokio::time::advance(STEP).await;
        self.tick += 1;
        let leases = self.leases().await;
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        for (i, worker) in self.workers.iter_mut().enumerate() {
            let beat_tick = self.tick % TAKE_EVERY == i as u64 % TAKE_EVERY;
            if beat_tick && worker.beating && worker.watch.is_some() {
                let counter = self.heartbeats.entry(worker.id.clone()).or_default();
                *counter += 1;
                worker.coordinator.cover().heartbeat_written(tokio::time::Instant::now(), *counter);
            }
            for lost in worker.coordinator.renew_all().await {
                if worker.consumers.get(lost.key()).is_some_and(|c| c.id() == lost.id()) {
                    worker.consumers.remove(lost.key());
                }
            }
            let beats: Vec<Heartbeat> =
                self.heartbeats.iter().map(|(w, n)| Heartbeat::bare(w.clone(), *n)).collect();
            let now = tokio::time::Instant::now();
            let mut fleet_changed = false;
            if let Some(watch) = worker.watch.as_mut().filter(|_| worker.next_read <= now) {
                fleet_changed = worker.coordinator.follow_fleet(watch, &beats, now, now).is_change();
                worker.next_read = watch.next_read(now);
            }
            if fleet_changed || beat_tick {
                let pass = worker.coordinator.take_pass().await.unwrap();
                // A release stops the consumer, then gives the lease back.
                for key in pass.release {
                    worker.consumers.remove(&key);
                    worker.coordinator.evict(&key).await.unwrap();
                }
                for held in pass.taken {
                    let lease = by_key.get(held.key().as_str()).copied();
                    assert!(lease.is_none_or(|l| !l.is_finished()), "{} took {} at SHARD_END", worker.id, held.key());
                    assert!(lease.is_none_or(|l| is_ready(l, &by_key)), "{} took {} before its parents ended", worker.id, held.key());
                    let previous = worker.consumers.insert(held.key().to_owned(), held);
                    assert!(previous.is_none_or(|p| !p.is_valid()), "{} was given a lease it still runs", worker.id);
                }
            }
        }
        self.check_exclusive();
    }

    /// No shard is delivered by two workers at once.
    fn check_exclusive(&self) {
        let mut holders: HashMap<String, Vec<&str>> = HashMap::new();
        for (w, held) in self.delivering() {
            holders.entry(held.key().to_string()).or_default().push(&self.workers[w].id);
        }
        for (key, workers) in holders {
            assert!(workers.len() <= 1, "{key} delivered by {workers:?} at once");
        }
    }

    async fn owners(&self) -> Vec<(LeaseKey, Option<String>)> {
        self.leases().await.into_iter().map(|l| (l.key, l.owner)).collect()
    }
}

async fn run(shards: usize, workers: usize, events: Vec<Event>, mixed: bool) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(shards, workers, mixed).await;
    for event in events {
        sim.apply(event).await;
    }
    // Quiet: no crashes, reshards, shard ends or stopping consumers, and the
    // heartbeat writes work again. Dead workers' leases expire, free ones
    // are taken, the load balances.
    for worker in &mut sim.workers {
        worker.beating = true;
    }
    for _ in 0..60 {
        sim.step().await;
    }
    let leases = sim.leases().await;
    let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
    for lease in leases.iter().filter(|l| is_ready(l, &by_key)) {
        let owner = lease.owner.as_deref();
        let worker = sim.workers.iter().find(|w| Some(w.id.as_str()) == owner);
        prop_assert!(worker.is_some(), "{} is ready but held by {:?}, not a live worker", lease.key, owner);
        let consumer = worker.unwrap().consumers.get(&lease.key);
        prop_assert!(consumer.is_some_and(|c| c.is_valid()), "{} is held by {:?} without a consumer", lease.key, owner);
    }
    let balanced = sim.owners().await;
    for _ in 0..30 {
        sim.step().await;
    }
    prop_assert_eq!(sim.owners().await, balanced, "leases changed hands after balancing");
    Ok(())
}

/// [`run`] on tokio's paused clock.
fn simulate(shards: usize, workers: usize, events: Vec<Event>, mixed: bool) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(run(shards, workers, events, mixed))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_coordinator_holds_its_rules_under_crashes_and_reshards(
        shards in 1usize..12,
        workers in 1usize..6,
        events in prop::collection::vec(event(), 0..120),
    ) {
        simulate(shards, workers, events, true)?;
    }

    #[test]
    fn heartbeat_leases_hold_the_same_rules_in_a_kcl_host_fleet(
        shards in 1usize..12,
        workers in 1usize..6,
        events in prop::collection::vec(event(), 0..120),
    ) {
        simulate(shards, workers, events, false)?;
    }
}
