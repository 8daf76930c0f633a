//! The application's control table, `<application>-KclHostControl`, and what
//! its heartbeat rows say about the fleet. It is kept apart from the lease
//! table because Java KCL reads every row of that one as a lease.
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `key` | S (hash key) | `worker/<worker id>`, or `deploy` |
//! | `heartbeat` | N | bumped once per renewal period while the worker runs; a new row starts at its writer's clock in ms, so a worker id's counter never goes back across restarts (lease rows record it: [`crate::lease::Lease::owner_heartbeat`]) |
//! | `beatMillis` | N | the worker's clock at its last beat, for people (the rules use only `heartbeat`) |
//! | `processorHash`, `processorSource` | S | the processor the worker runs, and where it was loaded from |
//! | `processorComponent` | S | its `name@version` metadata, when it has some |
//!
//! The `deploy` row (written by `kcl-host deploy`) names the processor every
//! worker should run: `hash` (the start of its SHA-256) and `source` (where
//! it is stored, `dynamodb://<application>-KclHostComponents/<hash>` (see
//! [`crate::swap::store`]), or a path), and the version before it as
//! `previousHash` / `previousSource` for `--rollback`.
//!
//! Why a heartbeat: one small row per worker, read strongly consistent every
//! [`poll_interval`] by the fleet's watchers (less often by the others; see
//! [`FleetWatch`]), lets the fleet see a worker die within that interval of
//! its last beat (so its leases are taken one failover time later, not up
//! to two), see one stop or join at once, and balance without stealing.
//! A worker that stops deletes its row; the row of one that died is deleted
//! by the others once it has been still for [`FORGET_AFTER`] failover times.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use crate::failure::policy::Retrying;
use crate::lease::rules::{ExpiryTracker, Fleet};
use crate::lease::table::KeyedTable;
use crate::lease::coordinator::Coordinator;
use crate::lease::{LeaseError, LeaseStore};

/// Prefix of a worker's heartbeat row key.
const WORKER: &str = "worker/";
/// The key of the deployed-version row.
const DEPLOY: &str = "deploy";

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
/// ([`crate::lease::coordinator::Liveness::beat`]).
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
}

impl FleetChange {
    /// Whether a take pass is worth doing now.
    pub fn is_change(self) -> bool {
        self != FleetChange::Same
    }
}

/// One worker's heartbeat row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The worker id (`worker/<id>` without its prefix).
    pub worker: String,
    /// The heartbeat counter; a worker is alive while it moves.
    pub heartbeat: u64,
    /// The worker's clock at its last beat, in milliseconds since the Unix epoch.
    pub beat_ms: Option<u64>,
    /// The processor it runs.
    pub running: Option<Version>,
    /// The process that writes it (host, pid and a nonce): two processes
    /// with one worker id tell each other apart by it.
    pub process: Option<String>,
    /// Its shards that are retrying failed records, by shard id.
    pub retrying: BTreeMap<String, Retrying>,
}

/// A processor version, as the `deploy` row names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// The start of the component's SHA-256 (`Processor::hash`).
    pub hash: String,
    /// Where every worker loads it from.
    pub source: String,
    /// `name@version` from the component's metadata (`Processor::component`).
    pub component: Option<String>,
}

impl Version {
    /// The hash, with `(name@version)` when there is one.
    pub fn describe(&self) -> String {
        match &self.component {
            Some(component) => format!("{} ({component})", self.hash),
            None => self.hash.clone(),
        }
    }
}

/// The `deploy` row: the version wanted, and the one before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployed {
    /// The version every worker should run.
    pub wanted: Version,
    /// The one before it, for `--rollback`.
    pub previous: Option<Version>,
}

/// One read of the whole control table.
#[derive(Clone, Debug, Default)]
pub struct ControlRead {
    /// Every worker's heartbeat row.
    pub heartbeats: Vec<Heartbeat>,
    /// The `deploy` row, when `kcl-host deploy` was used.
    pub deployed: Option<Deployed>,
}

/// The control table of one application.
#[derive(Clone, Debug)]
pub struct ControlTable {
    table: KeyedTable,
}

impl ControlTable {
    /// The control table of `application`.
    pub fn new(client: Client, application: &str) -> Self {
        let name = format!("{application}-KclHostControl");
        Self { table: KeyedTable { client, name, key: "key", what: "kcl-host control table" } }
    }

    /// Creates the table if it is missing.
    pub async fn ensure(&self) -> Result<(), LeaseError> {
        self.table.ensure().await
    }

    /// Bumps `worker`'s heartbeat (creating its row on the first beat), with
    /// the processor version it runs, as written by `process`: the counter
    /// it left. Unless `claim`, only while the row is `process`'s: `Ok(None)`
    /// when another process has taken the worker id over.
    /// `retrying` lists its shards retrying failed records (for `status`).
    pub async fn beat(&self, worker: &str, running: &Version, process: &str, claim: bool, retrying: &BTreeMap<String, Retrying>) -> Result<Option<u64>, LeaseError> {
        let millis = crate::clock::unix_ms();
        let mut expression =
            "SET heartbeat = if_not_exists(heartbeat, :millis) + :one, beatMillis = :millis, processorHash = :hash, processorSource = :source, process = :process".to_owned();
        let mut update = self
            .table
            .client
            .update_item()
            .table_name(&self.table.name)
            .key("key", AttributeValue::S(format!("{WORKER}{worker}")))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":hash", AttributeValue::S(running.hash.clone()))
            .expression_attribute_values(":source", AttributeValue::S(running.source.clone()))
            .expression_attribute_values(":millis", AttributeValue::N(millis.to_string()))
            .expression_attribute_values(":process", AttributeValue::S(process.to_owned()));
        if !claim {
            update = update.condition_expression("process = :process");
        }
        let mut remove = Vec::new();
        match &running.component {
            Some(component) => {
                expression.push_str(", processorComponent = :component");
                update = update.expression_attribute_values(":component", AttributeValue::S(component.clone()));
            }
            None => remove.push("processorComponent"),
        }
        if retrying.is_empty() {
            remove.push("retrying");
        } else {
            expression.push_str(", retrying = :retrying");
            let json = serde_json::to_string(retrying).expect("retry states serialize");
            update = update.expression_attribute_values(":retrying", AttributeValue::S(json));
        }
        if !remove.is_empty() {
            expression.push_str(" REMOVE ");
            expression.push_str(&remove.join(", "));
        }
        match update.update_expression(expression).return_values(ReturnValue::UpdatedNew).send().await {
            Ok(output) => match output.attributes().and_then(|a| a.get("heartbeat")) {
                Some(AttributeValue::N(n)) => Ok(n.parse().ok()),
                _ => Ok(None),
            },
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(None),
            Err(e) => Err(self.table.error("UpdateItem (heartbeat)", e)),
        }
    }

    /// Deletes `worker`'s row, if `process` still writes it: it has stopped
    /// and given its leases back.
    pub async fn leave(&self, worker: &str, process: &str) -> Result<(), LeaseError> {
        self.delete(worker, "process = :seen", AttributeValue::S(process.to_owned())).await
    }

    /// Deletes a dead worker's row, if its heartbeat is still `heartbeat`.
    pub async fn forget(&self, worker: &str, heartbeat: u64) -> Result<(), LeaseError> {
        self.delete(worker, "heartbeat = :seen", AttributeValue::N(heartbeat.to_string())).await
    }

    async fn delete(&self, worker: &str, condition: &str, seen: AttributeValue) -> Result<(), LeaseError> {
        let delete = self
            .table
            .client
            .delete_item()
            .table_name(&self.table.name)
            .key("key", AttributeValue::S(format!("{WORKER}{worker}")))
            .condition_expression(condition)
            .expression_attribute_values(":seen", seen);
        match delete.send().await {
            Ok(_) => Ok(()),
            // It beat again (alive after all), or another process writes it now.
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(()),
            Err(e) => Err(self.table.error("DeleteItem (heartbeat)", e)),
        }
    }

    /// Every row, read strongly consistent: a stale read could make a live
    /// worker look dead.
    pub async fn read(&self) -> Result<ControlRead, LeaseError> {
        let mut read = ControlRead::default();
        let mut pages = self.table.client.scan().table_name(&self.table.name).consistent_read(true).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.table.error("Scan (heartbeats)", e))?;
            for item in page.items() {
                let text = |name: &str| match item.get(name) {
                    Some(AttributeValue::S(value)) => Some(value.clone()),
                    _ => None,
                };
                let Some(key) = text("key") else { continue };
                if key == DEPLOY {
                    let version = |hash: &str, source: &str, component: &str| {
                        Some(Version { hash: text(hash)?, source: text(source)?, component: text(component) })
                    };
                    read.deployed = version("hash", "source", "component").map(|wanted| Deployed {
                        wanted,
                        previous: version("previousHash", "previousSource", "previousComponent"),
                    });
                    continue;
                }
                let (Some(worker), Some(AttributeValue::N(n))) = (key.strip_prefix(WORKER), item.get("heartbeat")) else {
                    continue;
                };
                let beat_ms = match item.get("beatMillis") {
                    Some(AttributeValue::N(ms)) => ms.parse().ok(),
                    _ => None,
                };
                let running = text("processorHash")
                    .zip(text("processorSource"))
                    .map(|(hash, source)| Version { hash, source, component: text("processorComponent") });
                if let Ok(heartbeat) = n.parse() {
                    let retrying = text("retrying").and_then(|json| serde_json::from_str(&json).ok()).unwrap_or_default();
                    read.heartbeats.push(Heartbeat { worker: worker.to_owned(), heartbeat, beat_ms, running, process: text("process"), retrying });
                }
            }
        }
        Ok(read)
    }

    /// Records `version` as the one every worker should run, the one wanted
    /// until now becoming the previous one.
    pub async fn deploy(&self, version: &Version, previous: Option<&Version>) -> Result<(), LeaseError> {
        let mut put = self
            .table
            .client
            .put_item()
            .table_name(&self.table.name)
            .item("key", AttributeValue::S(DEPLOY.into()))
            .item("hash", AttributeValue::S(version.hash.clone()))
            .item("source", AttributeValue::S(version.source.clone()));
        if let Some(component) = &version.component {
            put = put.item("component", AttributeValue::S(component.clone()));
        }
        if let Some(previous) = previous {
            put = put
                .item("previousHash", AttributeValue::S(previous.hash.clone()))
                .item("previousSource", AttributeValue::S(previous.source.clone()));
            if let Some(component) = &previous.component {
                put = put.item("previousComponent", AttributeValue::S(component.clone()));
            }
        }
        put.send().await.map_err(|e| self.table.error("PutItem (deploy)", e))?;
        Ok(())
    }
}

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
    fleet: Fleet,
}

impl FleetWatch {
    /// Watches the fleet as worker `me`, judging death after `failover_time`.
    pub fn new(me: impl Into<String>, failover_time: Duration) -> Self {
        let me = me.into();
        let fleet = Fleet { live: BTreeSet::from([me.clone()]), dead: BTreeMap::new() };
        let reads_per_second = DEFAULT_FLEET_READS_PER_SECOND;
        Self { me, failover_time, reads_per_second, tracker: ExpiryTracker::default(), beats: Vec::new(), fleet }
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
    /// when a worker joined, stopped or died.
    pub fn observe(&mut self, heartbeats: &[Heartbeat], now: Instant) -> FleetChange {
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
            if fleet == self.fleet { FleetChange::Same } else { FleetChange::Changed }
        } else {
            FleetChange::Departed
        };
        self.fleet = fleet;
        change
    }

    /// Notes a fresh read and tells `coordinator` what it needs of it: the
    /// fleet, and whether its next pass covers a worker that died or
    /// stopped ([`Self::covers_departures`]).
    pub fn inform<S: LeaseStore>(&mut self, heartbeats: &[Heartbeat], now: Instant, coordinator: &mut Coordinator<S>) -> FleetChange {
        let change = self.observe(heartbeats, now);
        if change.is_change() {
            coordinator.set_fleet(self.fleet.clone());
        }
        if change == FleetChange::Departed && self.covers_departures() {
            tracing::info!(
                "a worker died or stopped: as a watcher, taking every lease it left now (the others read the fleet every {:?})",
                self.others_read_every()
            );
            coordinator.cover_departures();
        }
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
        rows.iter().map(|(w, n)| Heartbeat { worker: w.to_string(), heartbeat: *n, beat_ms: None, running: None, process: None, retrying: BTreeMap::new() }).collect()
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
