//! Watching the fleet through its heartbeat rows ([`super::heartbeat`]):
//! who is live, who died, and when to read again.
//!
//! Why a heartbeat: one small row per worker, read strongly consistent every
//! [`poll_interval`] by the fleet's watchers (less often by the others; see
//! [`FleetWatch`]), lets the fleet see a worker die within that interval of
//! its last beat (so its leases are taken one failover time later, not up
//! to two), see one stop or join at once, and balance without stealing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::heartbeat::Heartbeat;
use super::rules::{ExpiryTracker, Fleet};

/// A dead worker's row is deleted after this many failover times.
pub const FORGET_AFTER: u32 = 6;

/// How often the fleet's watchers read the heartbeats: the delay it adds to
/// a failover and a graceful handoff.
pub fn poll_interval(failover_time: Duration) -> Duration {
    (failover_time / 4).min(Duration::from_millis(500))
}

/// A heartbeat read that takes longer is not judged on: what it shows may be
/// that old. Bounded so a worker knows how late a beat may land before some
/// reader could have judged it dead without seeing it
/// ([`super::held::Liveness::beat`]).
pub fn read_deadline(failover_time: Duration) -> Duration {
    failover_time / 4
}

/// How many workers read the heartbeats every [`poll_interval`]: the lowest
/// live worker ids. Two, so that a watcher's own death is seen as soon.
pub const WATCHERS: usize = 2;

/// Heartbeat reads a second the workers other than the watchers make
/// together, by default: each reads every `live workers / this` seconds,
/// between [`poll_interval`] and half the failover time.
pub const DEFAULT_FLEET_READS_PER_SECOND: u32 = 10;

/// What a heartbeat read showed of the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetChange {
    /// The same live and dead workers as before.
    Same,
    /// A worker joined (or came back), or a dead one's row was deleted;
    /// no live one left.
    Changed,
    /// A worker live before is not any more: it died or stopped.
    Departed,
    /// The same workers, and one of them left leases for the others to take
    /// ([`super::heartbeat::LeaseNews`]).
    LeasesFreed,
}

impl FleetChange {
    /// Whether a take pass is worth doing now.
    pub fn is_change(self) -> bool {
        self != FleetChange::Same
    }

    /// Whether a worker joined, stopped or died.
    pub fn is_new_fleet(self) -> bool {
        matches!(self, FleetChange::Changed | FleetChange::Departed)
    }
}

/// A worker's `leasesFreed` count, with the process that wrote it.
type Freed = (Option<String>, u64);

/// Turns successive heartbeat reads into a [`Fleet`]: a worker is dead once
/// its heartbeat has not moved for the failover time on this worker's clock.
///
/// It also says when to read again. Reads cost one request each, so a fleet
/// where every worker read every [`poll_interval`] would pay for workers ×
/// workers rows a second. Instead the [`WATCHERS`] read that often and, in a
/// large fleet, take every lease of a worker that died or stopped at once
/// ([`FleetWatch::covers_departures`]), giving the excess back once the
/// others know; the others read the fleet's [`DEFAULT_FLEET_READS_PER_SECOND`]
/// between them, so a join or a deploy reaches them later.
#[derive(Debug)]
pub struct FleetWatch {
    me: String,
    failover_time: Duration,
    reads_per_second: u32,
    tracker: ExpiryTracker,
    beats: Vec<(String, u64)>,
    /// The other workers' `leasesFreed`, as last read.
    freed: BTreeMap<String, Freed>,
    fleet: Fleet,
}

impl FleetWatch {
    /// Watches the fleet as worker `me`, judging death after `failover_time`.
    pub fn new(me: impl Into<String>, failover_time: Duration) -> Self {
        let me = me.into();
        let fleet = Fleet { live: BTreeSet::from([me.clone()]), dead: BTreeMap::new() };
        let reads_per_second = DEFAULT_FLEET_READS_PER_SECOND;
        Self { me, failover_time, reads_per_second, tracker: ExpiryTracker::default(), beats: Vec::new(), freed: BTreeMap::new(), fleet }
    }

    /// The same, with the workers other than the watchers reading
    /// `reads_per_second` times a second between them.
    pub fn with_fleet_reads(self, reads_per_second: u32) -> Self {
        Self { reads_per_second: reads_per_second.max(1), ..self }
    }

    /// Whether this worker is one of the [`WATCHERS`]: the lowest live ids.
    pub fn is_watcher(&self) -> bool {
        self.fleet.live.iter().take(WATCHERS).any(|w| w == &self.me)
    }

    /// How often a worker that is not a watcher reads the heartbeats in a
    /// fleet this size.
    pub fn others_read_every(&self) -> Duration {
        let fast = poll_interval(self.failover_time);
        let spread = Duration::from_secs(1) * self.fleet.live.len() as u32 / self.reads_per_second;
        spread.clamp(fast, (self.failover_time / 2).max(fast))
    }

    /// How often this worker reads the heartbeats.
    pub fn read_every(&self) -> Duration {
        if self.is_watcher() { poll_interval(self.failover_time) } else { self.others_read_every() }
    }

    /// When to read the heartbeats next, the last read done at `last`: a
    /// [`Self::read_every`] later, or when a live worker would be dead.
    pub fn next_read(&self, last: Instant) -> Instant {
        let next = last + self.read_every();
        self.next_death().map_or(next, |death| death.min(next))
    }

    /// Whether this worker, seeing a worker die or stop, takes every lease
    /// it left whatever the target: it is a watcher, and the others read so
    /// seldom (over two [`poll_interval`]s) that waiting for them would add
    /// more than a second to the failover.
    pub fn covers_departures(&self) -> bool {
        self.is_watcher() && self.others_read_every() > 2 * poll_interval(self.failover_time)
    }

    /// Notes a fresh read, and what changed: a take pass is worth doing now
    /// when a worker joined, stopped or died, or left leases to take.
    pub fn observe(&mut self, heartbeats: &[Heartbeat], now: Instant) -> FleetChange {
        // A worker restarted between two reads (a new process) starts its
        // count again: what it freed is news as well.
        let freed: BTreeMap<String, Freed> =
            heartbeats.iter().filter(|h| h.worker != self.me).map(|h| (h.worker.clone(), (h.process.clone(), h.leases_freed))).collect();
        let news = freed.iter().any(|(worker, n)| self.freed.get(worker).is_some_and(|before| before != n));
        self.freed = freed;
        let beats: Vec<(String, u64)> = heartbeats.iter().map(|h| (h.worker.clone(), h.heartbeat)).collect();
        self.tracker.observe(beats.iter().map(|(w, n)| (w.as_str(), *n)), now);
        let mut fleet = Fleet { live: BTreeSet::from([self.me.clone()]), dead: BTreeMap::new() };
        for (worker, beat) in &beats {
            if worker == &self.me {
                continue;
            }
            if self.tracker.is_stale(worker, *beat, now, self.failover_time) {
                fleet.dead.insert(worker.clone(), *beat);
            } else {
                fleet.live.insert(worker.clone());
            }
        }
        self.beats = beats;
        let change = if fleet.live.is_superset(&self.fleet.live) {
            match (fleet == self.fleet, news) {
                (false, _) => FleetChange::Changed,
                (true, true) => FleetChange::LeasesFreed,
                (true, false) => FleetChange::Same,
            }
        } else {
            FleetChange::Departed
        };
        self.fleet = fleet;
        change
    }

    /// The live and dead workers as last observed.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// When the first live worker would be dead if its heartbeat does not
    /// move: the moment to read the heartbeats again.
    pub fn next_death(&self) -> Option<Instant> {
        self.beats
            .iter()
            .filter(|(worker, _)| self.fleet.live.contains(worker) && worker != &self.me)
            .filter_map(|(worker, beat)| self.tracker.stale_at(worker, *beat, self.failover_time))
            .min()
    }

    /// Dead workers still for [`FORGET_AFTER`] failover times, with their
    /// last heartbeat: their rows can go.
    pub fn forgettable(&self, now: Instant) -> Vec<(String, u64)> {
        let long = self.failover_time * (FORGET_AFTER - 1);
        self.beats
            .iter()
            .filter(|(worker, beat)| {
                self.fleet.dead.contains_key(worker)
                    && self.tracker.stale_at(worker, *beat, self.failover_time).is_some_and(|dead| now >= dead + long)
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILOVER: Duration = Duration::from_secs(10);

    fn beats(rows: &[(&str, u64)]) -> Vec<Heartbeat> {
        rows.iter().map(|(w, n)| Heartbeat::bare(*w, *n)).collect()
    }

    #[test]
    fn a_still_heartbeat_is_dead_one_failover_time_after_it_was_first_seen() {
        let start = Instant::now();
        let mut watch = FleetWatch::new("me", FAILOVER);
        assert_eq!(watch.observe(&beats(&[("me", 1), ("w2", 7)]), start), FleetChange::Changed, "w2 joined");
        assert_eq!(watch.next_death(), Some(start + FAILOVER));
        assert_eq!(watch.observe(&beats(&[("me", 2), ("w2", 7)]), start + Duration::from_secs(9)), FleetChange::Same);
        assert_eq!(watch.observe(&beats(&[("me", 3), ("w2", 7)]), start + FAILOVER), FleetChange::Departed, "w2 died");
        assert_eq!(watch.fleet().dead, BTreeMap::from([("w2".to_owned(), 7)]));
        assert_eq!(watch.next_death(), None, "nobody left to watch");
        assert!(watch.forgettable(start + FAILOVER * 5).is_empty());
        assert_eq!(watch.forgettable(start + FAILOVER * FORGET_AFTER), [("w2".to_owned(), 7)]);
    }

    #[test]
    fn a_moving_heartbeat_stays_live_and_a_deleted_row_is_a_stop() {
        let start = Instant::now();
        let mut watch = FleetWatch::new("me", FAILOVER);
        watch.observe(&beats(&[("w2", 1)]), start);
        assert_eq!(watch.observe(&beats(&[("w2", 2)]), start + Duration::from_secs(8)), FleetChange::Same);
        assert_eq!(watch.observe(&beats(&[("w2", 3)]), start + Duration::from_secs(16)), FleetChange::Same);
        assert_eq!(watch.next_death(), Some(start + Duration::from_secs(26)));
        assert_eq!(watch.observe(&[], start + Duration::from_secs(17)), FleetChange::Departed, "w2 stopped");
        assert_eq!(watch.fleet().live, BTreeSet::from(["me".to_owned()]), "this worker is always live to itself");
    }

    #[test]
    fn leases_freed_by_another_worker_are_news_once() {
        let start = Instant::now();
        let mut watch = FleetWatch::new("me", FAILOVER);
        let freed = |n: u64| vec![Heartbeat { leases_freed: n, ..Heartbeat::bare("w2", n + 1) }];
        assert_eq!(watch.observe(&freed(0), start), FleetChange::Changed, "w2 joined");
        assert_eq!(watch.observe(&freed(0), start + Duration::from_secs(1)), FleetChange::Same);
        let news = watch.observe(&freed(1), start + Duration::from_secs(2));
        assert_eq!(news, FleetChange::LeasesFreed);
        assert!(news.is_change() && !news.is_new_fleet());
        assert_eq!(watch.observe(&freed(1), start + Duration::from_secs(3)), FleetChange::Same);
        // w2 restarts between two reads and frees a lease: its count is 1 again.
        let restarted = vec![Heartbeat { process: Some("w2, second process".into()), ..freed(1)[0].clone() }];
        assert_eq!(watch.observe(&restarted, start + Duration::from_secs(4)), FleetChange::LeasesFreed);
    }

    /// A fleet of `n` live workers `w000`.., as worker `me` sees it.
    fn fleet_of(n: usize, me: &str) -> FleetWatch {
        let rows: Vec<(String, u64)> = (0..n).map(|i| (format!("w{i:03}"), 1)).collect();
        let rows: Vec<(&str, u64)> = rows.iter().map(|(w, b)| (w.as_str(), *b)).collect();
        let mut watch = FleetWatch::new(me, FAILOVER);
        watch.observe(&beats(&rows), Instant::now());
        watch
    }

    #[test]
    fn the_two_lowest_ids_watch_closely_and_the_others_share_ten_reads_a_second() {
        let fast = poll_interval(FAILOVER);
        for me in ["w000", "w001"] {
            assert!(fleet_of(200, me).is_watcher());
            assert_eq!(fleet_of(200, me).read_every(), fast);
            assert!(fleet_of(200, me).covers_departures(), "the others read every 5 s");
        }
        let other = fleet_of(200, "w002");
        assert!(!other.is_watcher() && !other.covers_departures());
        assert_eq!(other.read_every(), FAILOVER / 2, "200 workers / 10 a second, at most half the failover time");
        assert_eq!(fleet_of(50, "w049").read_every(), Duration::from_secs(5));
        assert_eq!(fleet_of(20, "w019").read_every(), Duration::from_secs(2));
        // Small fleets: every worker reads every 500 ms, as before, and nobody covers.
        assert_eq!(fleet_of(4, "w003").read_every(), fast);
        assert!(!fleet_of(10, "w000").covers_departures(), "the others read every second");
        assert!(fleet_of(11, "w000").covers_departures());
        assert_eq!(fleet_of(4, "w003").with_fleet_reads(1).read_every(), Duration::from_secs(4), "4 workers at one read a second between them: every 4 s");
    }

    #[test]
    fn the_next_read_comes_early_when_a_worker_would_be_dead() {
        let start = Instant::now();
        let mut watch = fleet_of(200, "w100");
        assert_eq!(watch.next_read(start), start + FAILOVER / 2);
        // A worker seen still since a second before: dead 9 s from now, after the next read.
        let rows: Vec<(String, u64)> = (0..200).map(|i| (format!("w{i:03}"), 2)).collect();
        let rows: Vec<(&str, u64)> = rows.iter().map(|(w, b)| (w.as_str(), *b)).collect();
        watch.observe(&beats(&rows), start);
        let later = start + Duration::from_secs(8);
        assert_eq!(watch.next_read(later), start + FAILOVER, "the moment the still workers would be dead");
    }
}
