//! Per-shard states a worker reports in its heartbeat row for `status`: one
//! JSON attribute of the row, keyed by shard (its shards retrying, its
//! parallel shards' calls in flight). The lease rules never read them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::heartbeat::{Heartbeat, Report};

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

    /// Every shard's state now.
    pub fn snapshot(&self) -> BTreeMap<String, T> {
        self.shards.lock().expect("not poisoned").clone()
    }

    /// What the heartbeat row reports: the states as JSON, removed while there are none.
    pub fn report(&self) -> Report {
        let shards = self.snapshot();
        let json = (!shards.is_empty()).then(|| AttributeValue::S(serde_json::to_string(&shards).expect("shard states serialize")));
        vec![(self.attribute, json)]
    }
}

/// The states `heartbeat`'s worker reports as `attribute`, by shard id.
pub fn reported<T: DeserializeOwned>(heartbeat: &Heartbeat, attribute: &str) -> BTreeMap<String, T> {
    heartbeat.text(attribute).and_then(|json| serde_json::from_str(json).ok()).unwrap_or_default()
}
