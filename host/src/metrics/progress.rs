//! Each shard's progress as its worker reports it to `status` and the
//! dashboard: records processed since the worker took the lease, how far its
//! last batch was behind the stream's tip, the processor version it runs
//! (during a rollout, the canary's differs), its open window, records given up on. A reader
//! draws throughput from two readings of `records`.
//!
//! Kept out of the heartbeat row on purpose: DynamoDB bills an `UpdateItem`
//! by the whole item, so every beat would pay for these bytes. And kept out
//! of the control table: the fleet's watchers read that table whole twice a
//! second, and a read is billed by the bytes of every row it reads, which
//! these rows would multiply with the shards (at 10,000 leases on 200
//! workers, six times the heartbeat rows' cost). Each worker writes them to
//! a row of its own in the progress table `<application>-KclHostProgress`
//! (made on first use), `progress/<worker id>`, every [`PERIOD`] and only
//! when they changed (at once when a shard changes version), and deletes it
//! with its heartbeat row.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::aws::AwsError;
use crate::lease::board::ShardBoard;
use crate::lease::table::{Item, KeyedTable};
use crate::lease::LeaseError;

/// How often a worker writes its progress row (when it changed).
pub const PERIOD: Duration = Duration::from_secs(5);

/// The name of `application`'s progress table.
pub fn progress_table_name(application: &str) -> String {
    format!("{application}-KclHostProgress")
}

/// The progress table as a [`KeyedTable`].
pub fn progress_table(client: aws_sdk_dynamodb::Client, application: &str) -> KeyedTable {
    KeyedTable { client, name: progress_table_name(application), key: "key", what: "kcl-host progress table" }
}

/// Prefix of a worker's progress row key.
const PROGRESS: &str = "progress/";

/// The attribute that holds the shards' progress, as JSON.
const SHARDS: &str = "shards";

/// The attribute that holds the worker's [`RolloutReport`], as JSON.
const ROLLOUT: &str = "rollout";

/// One shard's progress on its current worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Records processed since this worker took the lease.
    pub records: u64,
    /// `MillisBehindLatest` of the last batch read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub millis_behind: Option<u64>,
    /// The source its stream is read from: `kinesis` or `dynamodb-streams`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The processor version the shard runs: its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processor: Option<String>,
    /// With `--window`: the start of the shard's open window (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start_ms: Option<u64>,
    /// Records the failure policy wrote to the failure target.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dead_lettered: u64,
    /// Records the failure policy dropped (no failure target).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where this worker's rollout of a new processor version stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutReport {
    /// The version on trial (its hash), while one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<String>,
    /// The shard running it first, while it is on its canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<String>,
    /// When its probation ends (ms since the Unix epoch), once every shard runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probation_until_ms: Option<u64>,
    /// Versions rolled back on this worker (and blocked for its life).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolled_back: Vec<String>,
}

/// The progress of a worker's shards, by lease key, and of its rollout.
pub struct ProgressBoard {
    shards: ShardBoard<Progress>,
    rollout: std::sync::Mutex<RolloutReport>,
    /// A shard changed version: written at once, so a rollout's canary shows.
    news: Notify,
}

impl Default for ProgressBoard {
    fn default() -> Self {
        Self { shards: ShardBoard::new(SHARDS), rollout: Default::default(), news: Notify::new() }
    }
}

impl ProgressBoard {
    /// Changes the progress of the shard leased as `lease`.
    pub fn update(&self, lease: &str, change: impl FnOnce(&mut Progress)) {
        self.shards.update(lease, change);
    }

    /// The shard leased as `lease` runs `processor` now.
    pub fn running(&self, lease: &str, processor: &str) {
        self.shards.update(lease, |p| p.processor = Some(processor.to_owned()));
        self.news.notify_one();
    }

    /// The worker's rollout stands at `report` now.
    pub fn rollout(&self, report: RolloutReport) {
        *self.rollout.lock().expect("not poisoned") = report;
        self.news.notify_one();
    }

    /// The shard leased as `lease` is no longer this worker's.
    pub fn forget(&self, lease: &str) {
        self.shards.set(lease, None);
    }
}

/// Writes `worker`'s progress row every [`PERIOD`] while it changed, until aborted.
pub async fn write_every(table: KeyedTable, worker: String, board: std::sync::Arc<ProgressBoard>) {
    let (mut written, mut ready) = (None, false);
    loop {
        tokio::select! {
            () = tokio::time::sleep(PERIOD) => {}
            () = board.news.notified() => {}
        }
        let now = (board.shards.snapshot(), board.rollout.lock().expect("not poisoned").clone());
        if written.as_ref() == Some(&now) {
            continue;
        }
        if !ready {
            match table.ensure().await {
                Ok(()) => ready = true,
                Err(e) => {
                    tracing::debug!("the progress table is not ready (status shows this worker's progress older): {e}");
                    continue;
                }
            }
        }
        let rollout = serde_json::to_string(&now.1).expect("a rollout report serializes");
        let [(_, shards)] = <[_; 1]>::try_from(board.shards.report()).expect("a board reports one attribute");
        let put = table
            .client
            .put_item()
            .table_name(&table.name)
            .item("key", AttributeValue::S(format!("{PROGRESS}{worker}")))
            .item("atMillis", AttributeValue::N(crate::clock::unix_ms().to_string()))
            .item(SHARDS, shards.unwrap_or(AttributeValue::S("{}".into())))
            .item(ROLLOUT, AttributeValue::S(rollout));
        match put.send().await {
            Ok(_) => written = Some(now),
            Err(e) => tracing::debug!("could not write this worker's progress row (status shows it older): {}", table.error("PutItem (progress)", e)),
        }
    }
}

/// Deletes `worker`'s progress row: it stopped, or died and was forgotten.
pub async fn forget(table: &KeyedTable, worker: &str) -> Result<(), LeaseError> {
    let delete = table.client.delete_item().table_name(&table.name).key("key", AttributeValue::S(format!("{PROGRESS}{worker}")));
    match delete.send().await.map_err(|e| table.error("DeleteItem (progress)", e)) {
        // No worker wrote progress yet: nothing to forget.
        Err(LeaseError::Aws(AwsError::TableMissing(_))) => Ok(()),
        done => done.map(|_| ()),
    }
}

/// Every row of the progress table; none when no worker made it yet.
pub async fn read(table: &KeyedTable) -> Result<Vec<Item>, LeaseError> {
    let mut rows = Vec::new();
    let mut pages = table.client.scan().table_name(&table.name).into_paginator().send();
    while let Some(page) = pages.next().await {
        match page.map_err(|e| table.error("Scan (progress)", e)) {
            Ok(page) => rows.extend(page.items().iter().cloned()),
            Err(LeaseError::Aws(AwsError::TableMissing(_))) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
    }
    Ok(rows)
}

/// Every worker's reported progress in the progress table's `rows`, by
/// worker and lease key.
pub fn reported(rows: &[Item]) -> BTreeMap<(String, String), Progress> {
    let mut all = BTreeMap::new();
    for item in rows {
        let (Some(AttributeValue::S(key)), Some(AttributeValue::S(json))) = (item.get("key"), item.get(SHARDS)) else { continue };
        let Some(worker) = key.strip_prefix(PROGRESS) else { continue };
        let Ok(shards) = serde_json::from_str::<BTreeMap<String, Progress>>(json) else { continue };
        all.extend(shards.into_iter().map(|(shard, progress)| ((worker.to_owned(), shard), progress)));
    }
    all
}

/// Every worker's reported rollout in the progress table's `rows`, by worker.
pub fn reported_rollouts(rows: &[Item]) -> BTreeMap<String, RolloutReport> {
    rows.iter()
        .filter_map(|item| {
            let (Some(AttributeValue::S(key)), Some(AttributeValue::S(json))) = (item.get("key"), item.get(ROLLOUT)) else { return None };
            Some((key.strip_prefix(PROGRESS)?.to_owned(), serde_json::from_str(json).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_progress_adds_up_and_reads_back_as_written() {
        let board = ProgressBoard::default();
        board.update("shardId-1", |p| p.records += 10);
        board.update("shardId-1", |p| p.records += 5);
        board.update("shardId-1", |p| p.millis_behind = Some(1200));
        board.update("shardId-2", |p| p.dead_lettered += 1);
        let [(_, Some(AttributeValue::S(json)))] = <[_; 1]>::try_from(board.shards.report()).unwrap() else { panic!("a report") };
        assert_eq!(json, r#"{"shardId-1":{"records":15,"millis_behind":1200},"shardId-2":{"records":0,"dead_lettered":1}}"#);
        let row = [("key", "progress/w1"), (SHARDS, json.as_str())].map(|(k, v)| (k.to_owned(), AttributeValue::S(v.to_owned())));
        let reported = reported(&[row.into_iter().collect()]);
        assert_eq!(reported[&("w1".to_owned(), "shardId-1".to_owned())], Progress { records: 15, millis_behind: Some(1200), ..Default::default() });
        assert_eq!(reported.len(), 2);
    }
}
