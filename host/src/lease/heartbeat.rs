//! The fleet's heartbeat rows in the application's control table,
//! `<application>-KclHostControl`. The table is kept apart from the lease
//! table because Java KCL reads every row of that one as a lease; besides
//! the heartbeats it holds the swap room's `deploy` row
//! ([`crate::swap::deploy`]), which this module reads with them (one Scan)
//! and hands on untouched.
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `key` | S (hash key) | `worker/<worker id>` |
//! | `heartbeat` | N | bumped once per renewal period while the worker runs; a new row starts at its writer's clock in ms, so a worker id's counter never goes back across restarts (lease rows record it: [`crate::lease::Lease::owner_heartbeat`]) |
//! | `beatMillis` | N | the worker's clock at its last beat, for people (the rules use only `heartbeat`) |
//! | `process` | S | the process that writes the row (host, pid and a nonce) |
//! | `leasesFreed` | N | how many times this worker left leases for the others to take (created them, finished a parent, gave one back): a reader that sees it move makes a take pass ([`LeaseNews`]) |
//! | `streams` | S | a multi-stream worker's streams, as its lease keys name them (a JSON list): a swap of streams ([`super::rules::plan_swap`]) gives a worker only a stream it reads |
//! | others | | the worker's [`Report`]: what other rooms tell `status` (the processor it runs, its shards retrying, its parallel shards' calls; see [`super::board`]); the lease rules never read them |
//!
//! A worker that stops deletes its row; the row of one that died is deleted
//! by the others once it has been still for [`super::watch::FORGET_AFTER`]
//! failover times.

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;

use super::table::Item;
use super::table::KeyedTable;
use super::LeaseError;

/// Prefix of a worker's heartbeat row key.
const WORKER: &str = "worker/";

/// What a worker's heartbeat row reports besides the heartbeat, written
/// with every beat: attribute name → value, `None` removing the attribute.
pub type Report = Vec<(&'static str, Option<AttributeValue>)>;

/// The heartbeat attribute [`LeaseNews`] writes.
const LEASES_FREED: &str = "leasesFreed";

/// This worker's news for the fleet's take passes: it left leases for the
/// others to take. Leases change hands mostly when the fleet does, which the
/// heartbeats show; what they do not show — children ready after a parent
/// ended, new shards, a lease given back — this does, so that the others
/// need not scan the lease table often just in case.
#[derive(Debug, Default)]
pub struct LeaseNews {
    freed: std::sync::atomic::AtomicU64,
    /// Wakes the heartbeat task, so the news goes out at once.
    pub written: tokio::sync::Notify,
}

impl LeaseNews {
    /// Leases were left for the others: the next beat (written now) says so.
    pub fn freed(&self) {
        self.freed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.written.notify_one();
    }

    /// The attribute for the next beat.
    pub fn report(&self) -> (&'static str, Option<AttributeValue>) {
        let freed = self.freed.load(std::sync::atomic::Ordering::Relaxed);
        (LEASES_FREED, Some(AttributeValue::N(freed.to_string())))
    }
}

/// The heartbeat attribute that lists a multi-stream worker's streams.
const STREAMS: &str = "streams";

/// What a multi-stream worker's heartbeat says of the streams it reads:
/// their parts of its lease keys ([`super::LeaseKey::stream_part`]).
pub fn streams_report(streams: &[String]) -> Report {
    vec![(STREAMS, Some(AttributeValue::S(serde_json::to_string(streams).expect("strings serialize"))))]
}

/// The name of `application`'s control table.
pub fn control_table_name(application: &str) -> String {
    format!("{application}-KclHostControl")
}

/// The control table as a [`KeyedTable`], for the rooms that keep rows in it.
pub fn control_table(client: Client, application: &str) -> KeyedTable {
    KeyedTable { client, name: control_table_name(application), key: "key", what: "kcl-host control table" }
}

/// One worker's heartbeat row.
#[derive(Clone, Debug, PartialEq)]
pub struct Heartbeat {
    /// The worker id (`worker/<id>` without its prefix).
    pub worker: String,
    /// The heartbeat counter; a worker is alive while it moves.
    pub heartbeat: u64,
    /// The worker's clock at its last beat, in milliseconds since the Unix epoch.
    pub beat_ms: Option<u64>,
    /// The process that writes it (host, pid and a nonce): two processes
    /// with one worker id tell each other apart by it.
    pub process: Option<String>,
    /// `leasesFreed`: moves when the worker leaves leases for the others.
    pub leases_freed: u64,
    /// The whole row, for the readers of its [`Report`].
    pub row: Item,
}

impl Heartbeat {
    /// A row with only a counter, as the rules see it.
    pub fn bare(worker: impl Into<String>, heartbeat: u64) -> Self {
        Self { worker: worker.into(), heartbeat, beat_ms: None, process: None, leases_freed: 0, row: Item::new() }
    }

    /// The streams the worker reads, as its lease keys name them; `None`
    /// when the row does not say (one stream, or an older kcl-host).
    pub fn streams(&self) -> Option<std::collections::BTreeSet<String>> {
        self.text(STREAMS).and_then(|json| serde_json::from_str(json).ok())
    }

    /// A string attribute of the row.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.row.get(name) {
            Some(AttributeValue::S(value)) => Some(value),
            _ => None,
        }
    }
}

/// One read of the whole control table.
#[derive(Clone, Debug, Default)]
pub struct ControlRead {
    /// Every worker's heartbeat row.
    pub heartbeats: Vec<Heartbeat>,
    /// The rows that are not heartbeats (the `deploy` row), as they are.
    pub others: Vec<Item>,
}

/// The heartbeat rows of one application's control table.
#[derive(Clone, Debug)]
pub struct HeartbeatTable {
    table: KeyedTable,
}

impl HeartbeatTable {
    /// The heartbeat rows of `application`.
    pub fn new(client: Client, application: &str) -> Self {
        Self { table: control_table(client, application) }
    }

    /// The control table itself, for the rows other rooms keep in it.
    pub fn keyed(&self) -> &KeyedTable {
        &self.table
    }

    /// Creates the control table if it is missing.
    pub async fn ensure(&self) -> Result<(), LeaseError> {
        self.table.ensure().await
    }

    /// Bumps `worker`'s heartbeat (creating its row on the first beat), with
    /// its `report`, as written by `process`: the counter it left. Unless
    /// `claim`, only while the row is `process`'s: `Ok(None)` when another
    /// process has taken the worker id over.
    pub async fn beat(&self, worker: &str, process: &str, claim: bool, report: &Report) -> Result<Option<u64>, LeaseError> {
        let millis = crate::clock::unix_ms();
        let mut set = vec!["heartbeat = if_not_exists(heartbeat, :millis) + :one".to_owned(), "beatMillis = :millis".into(), "process = :process".into()];
        let mut update = self
            .table
            .client
            .update_item()
            .table_name(&self.table.name)
            .key("key", AttributeValue::S(format!("{WORKER}{worker}")))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":millis", AttributeValue::N(millis.to_string()))
            .expression_attribute_values(":process", AttributeValue::S(process.to_owned()));
        if !claim {
            update = update.condition_expression("process = :process");
        }
        let mut remove = Vec::new();
        for (name, value) in report {
            match value {
                Some(value) => {
                    set.push(format!("{name} = :{name}"));
                    update = update.expression_attribute_values(format!(":{name}"), value.clone());
                }
                None => remove.push(*name),
            }
        }
        let mut expression = format!("SET {}", set.join(", "));
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
                match parse(item) {
                    Some(heartbeat) => read.heartbeats.push(heartbeat),
                    None if !is_worker_row(item) => read.others.push(item.clone()),
                    None => {}
                }
            }
        }
        Ok(read)
    }
}

fn is_worker_row(item: &Item) -> bool {
    matches!(item.get("key"), Some(AttributeValue::S(key)) if key.starts_with(WORKER))
}

/// A heartbeat row; `None` for another row, or one without a counter.
fn parse(item: &Item) -> Option<Heartbeat> {
    let Some(AttributeValue::S(key)) = item.get("key") else { return None };
    let (Some(worker), Some(AttributeValue::N(n))) = (key.strip_prefix(WORKER), item.get("heartbeat")) else { return None };
    let number = |name: &str| match item.get(name) {
        Some(AttributeValue::N(ms)) => ms.parse().ok(),
        _ => None,
    };
    let process = match item.get("process") {
        Some(AttributeValue::S(process)) => Some(process.clone()),
        _ => None,
    };
    Some(Heartbeat {
        worker: worker.to_owned(),
        heartbeat: n.parse().ok()?,
        beat_ms: number("beatMillis"),
        process,
        leases_freed: number(LEASES_FREED).unwrap_or(0),
        row: item.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_lists_the_streams_its_worker_wrote_and_says_nothing_without_them() {
        let parts = ["000000000000:orders:1700000000".to_owned(), "000000000000:refunds:1700000001".to_owned()];
        let mut beat = Heartbeat::bare("w1", 1);
        assert_eq!(beat.streams(), None, "one stream, or an older kcl-host");
        beat.row.extend(streams_report(&parts).into_iter().filter_map(|(name, value)| Some((name.to_owned(), value?))));
        assert_eq!(beat.streams(), Some(parts.into_iter().collect()));
    }
}
