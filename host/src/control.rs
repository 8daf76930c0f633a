//! The application's control table, `<application>-KclHostControl`, and what
//! its heartbeat rows say about the fleet. It is kept apart from the lease
//! table because Java KCL reads every row of that one as a lease.
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `key` | S (hash key) | `worker/<worker id>`, or `deploy` |
//! | `heartbeat` | N | bumped once per renewal period while the worker runs |
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
//! [`poll_interval`], lets the others see a worker die within that interval
//! of its last beat (so they take its leases one failover time later, not up
//! to two), see one stop or join at once, and balance without stealing.
//! A worker that stops deletes its row; the row of one that died is deleted
//! by the others once it has been still for [`FORGET_AFTER`] failover times.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use crate::failure::policy::Retrying;
use crate::lease::rules::{ExpiryTracker, Fleet};
use crate::lease::table::KeyedTable;
use crate::lease::LeaseError;

/// Prefix of a worker's heartbeat row key.
const WORKER: &str = "worker/";
/// The key of the deployed-version row.
const DEPLOY: &str = "deploy";

/// A dead worker's row is deleted after this many failover times.
pub const FORGET_AFTER: u32 = 6;

/// How often every worker reads the heartbeats: the delay it adds to a
/// failover, a graceful handoff and a join.
pub fn poll_interval(failover_time: Duration) -> Duration {
    (failover_time / 4).min(Duration::from_millis(500))
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
    /// the processor version it runs, as written by `process`. Unless
    /// `claim`, only while the row is `process`'s: `Ok(false)` when another
    /// process has taken the worker id over.
    /// `retrying` lists its shards retrying failed records (for `status`).
    pub async fn beat(&self, worker: &str, running: &Version, process: &str, claim: bool, retrying: &BTreeMap<String, Retrying>) -> Result<bool, LeaseError> {
        let millis = crate::clock::unix_ms();
        let mut expression =
            "ADD heartbeat :one SET beatMillis = :millis, processorHash = :hash, processorSource = :source, process = :process".to_owned();
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
        match update.update_expression(expression).send().await {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
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
#[derive(Debug)]
pub struct FleetWatch {
    me: String,
    failover_time: Duration,
    tracker: ExpiryTracker,
    beats: Vec<(String, u64)>,
    fleet: Fleet,
}

impl FleetWatch {
    /// Watches the fleet as worker `me`, judging death after `failover_time`.
    pub fn new(me: impl Into<String>, failover_time: Duration) -> Self {
        let me = me.into();
        let fleet = Fleet { live: BTreeSet::from([me.clone()]), dead: BTreeSet::new() };
        Self { me, failover_time, tracker: ExpiryTracker::default(), beats: Vec::new(), fleet }
    }

    /// Notes a fresh read; `true` when the fleet changed so that a take pass
    /// is worth doing now (a worker joined, stopped or died).
    pub fn observe(&mut self, heartbeats: &[Heartbeat], now: Instant) -> bool {
        let beats: Vec<(String, u64)> = heartbeats.iter().map(|h| (h.worker.clone(), h.heartbeat)).collect();
        self.tracker.observe(beats.iter().map(|(w, n)| (w.as_str(), *n)), now);
        let mut fleet = Fleet { live: BTreeSet::from([self.me.clone()]), dead: BTreeSet::new() };
        for (worker, beat) in &beats {
            if worker == &self.me {
                continue;
            }
            if self.tracker.is_stale(worker, *beat, now, self.failover_time) {
                fleet.dead.insert(worker.clone());
            } else {
                fleet.live.insert(worker.clone());
            }
        }
        self.beats = beats;
        let changed = fleet != self.fleet;
        self.fleet = fleet;
        changed
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
                self.fleet.dead.contains(worker)
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
        assert!(watch.observe(&beats(&[("me", 1), ("w2", 7)]), start), "w2 joined");
        assert_eq!(watch.next_death(), Some(start + FAILOVER));
        assert!(!watch.observe(&beats(&[("me", 2), ("w2", 7)]), start + Duration::from_secs(9)));
        assert!(watch.observe(&beats(&[("me", 3), ("w2", 7)]), start + FAILOVER), "w2 died");
        assert_eq!(watch.fleet().dead, BTreeSet::from(["w2".to_owned()]));
        assert_eq!(watch.next_death(), None, "nobody left to watch");
        assert!(watch.forgettable(start + FAILOVER * 5).is_empty());
        assert_eq!(watch.forgettable(start + FAILOVER * FORGET_AFTER), [("w2".to_owned(), 7)]);
    }

    #[test]
    fn a_moving_heartbeat_stays_live_and_a_deleted_row_is_a_stop() {
        let start = Instant::now();
        let mut watch = FleetWatch::new("me", FAILOVER);
        watch.observe(&beats(&[("w2", 1)]), start);
        assert!(!watch.observe(&beats(&[("w2", 2)]), start + Duration::from_secs(8)));
        assert!(!watch.observe(&beats(&[("w2", 3)]), start + Duration::from_secs(16)));
        assert_eq!(watch.next_death(), Some(start + Duration::from_secs(26)));
        assert!(watch.observe(&[], start + Duration::from_secs(17)), "w2 stopped");
        assert_eq!(watch.fleet().live, BTreeSet::from(["me".to_owned()]), "this worker is always live to itself");
    }
}
