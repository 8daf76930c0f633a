//! Per-shard states a worker reports in the control table for `status`: one
//! JSON attribute of a row, keyed by shard (in its heartbeat row: its shards
//! retrying, its parallel shards' calls in flight; in its progress row:
//! [`crate::metrics::progress`]). The lease rules never read them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::heartbeat::{Heartbeat, Report};

/// Most bytes of JSON one board adds to a heartbeat row (an item holds 400 KB).
pub const REPORT_BYTES: usize = 64 * 1024;

/// The states of a worker's shards that the heartbeat row reports as the
/// attribute `attribute` (absent while no shard has one).
#[derive(Debug)]
pub struct ShardBoard<T> {
    attribute: &'static str,
    shards: Mutex<BTreeMap<String, T>>,
}

impl<T: Clone + Serialize + DeserializeOwned> ShardBoard<T> {
    /// An empty board, reported as `attribute`.
    pub fn new(attribute: &'static str) -> Self {
        Self { attribute, shards: Mutex::new(BTreeMap::new()) }
    }

    /// `shard`'s state now, or none (`None`).
    pub fn set(&self, shard: &str, state: Option<T>) {
        let mut shards = self.shards.lock().expect("not poisoned");
        match state {
            Some(state) => shards.insert(shard.to_owned(), state),
            None => shards.remove(shard),
        };
    }

    /// Changes `shard`'s state with `change`, from the default when it has none.
    pub fn update(&self, shard: &str, change: impl FnOnce(&mut T))
    where
        T: Default,
    {
        let mut shards = self.shards.lock().expect("not poisoned");
        // Found without allocating a key: this runs with every batch.
        match shards.get_mut(shard) {
            Some(state) => change(state),
            None => change(shards.entry(shard.to_owned()).or_default()),
        }
    }

    /// Every shard's state now.
    pub fn snapshot(&self) -> BTreeMap<String, T> {
        self.shards.lock().expect("not poisoned").clone()
    }

    /// What the heartbeat row reports: the states as JSON, removed while
    /// there are none. At most [`REPORT_BYTES`] of it: the shards (in
    /// order) that fit, so no state can grow the row past DynamoDB's item
    /// limit and cost the worker its heartbeat.
    pub fn report(&self) -> Report {
        let mut shards = self.snapshot();
        let mut json = serde_json::to_string(&shards).expect("shard states serialize");
        if json.len() > REPORT_BYTES {
            let mut kept = BTreeMap::new();
            let mut size = 2;
            for (shard, state) in std::mem::take(&mut shards) {
                let entry = serde_json::to_string(&state).expect("a shard state serializes").len() + shard.len() + 4;
                if size + entry > REPORT_BYTES {
                    break;
                }
                size += entry;
                kept.insert(shard, state);
            }
            json = serde_json::to_string(&kept).expect("shard states serialize");
            shards = kept;
        }
        vec![(self.attribute, (!shards.is_empty()).then_some(AttributeValue::S(json)))]
    }
}

/// The states `heartbeat`'s worker reports as `attribute`, by shard id.
pub fn reported<T: DeserializeOwned>(heartbeat: &Heartbeat, attribute: &str) -> BTreeMap<String, T> {
    heartbeat.text(attribute).and_then(|json| serde_json::from_str(json).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_keeps_to_its_size_however_many_and_long_the_states() {
        let board: ShardBoard<String> = ShardBoard::new("retrying");
        for shard in 0..1_000 {
            board.set(&format!("shardId-{shard:012}"), Some("x".repeat(4096)));
        }
        let report = board.report();
        let Some(AttributeValue::S(json)) = &report[0].1 else { panic!("a report: {report:?}") };
        assert!(json.len() <= REPORT_BYTES, "{} bytes", json.len());
        let read: BTreeMap<String, String> = serde_json::from_str(json).unwrap();
        assert!(read.len() >= 10 && read.contains_key("shardId-000000000000"), "the first shards that fit: {}", read.len());
        board.set("shardId-000000000000", None);
        assert!(board.report()[0].1.is_some());
    }
}
