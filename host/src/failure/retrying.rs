//! The shards a worker is retrying, as its heartbeat row reports them to
//! `status` (and the metrics count them).

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};

use crate::lease::heartbeat::{Heartbeat, Report};

/// A shard that is retrying, for `status` (through the heartbeat) and the metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retrying {
    /// When the records first failed, in ms since the Unix epoch.
    pub since_ms: u64,
    /// Failed calls on the records now retried.
    pub attempts: u32,
    /// The last error.
    pub last_error: String,
    /// `max-retry-attempts`; `None` retries without limit.
    pub limit: Option<u32>,
}

/// The shards of a worker that are retrying now, as its heartbeat reports them.
#[derive(Debug, Default)]
pub struct RetryBoard(Mutex<BTreeMap<String, Retrying>>);

impl RetryBoard {
    /// `shard` is retrying (`Some`), or no longer is.
    pub fn set(&self, shard: &str, state: Option<Retrying>) {
        let mut shards = self.0.lock().expect("not poisoned");
        match state {
            Some(state) => shards.insert(shard.to_owned(), state),
            None => shards.remove(shard),
        };
    }

    /// Every shard retrying now.
    pub fn snapshot(&self) -> BTreeMap<String, Retrying> {
        self.0.lock().expect("not poisoned").clone()
    }

    /// What the heartbeat row reports: the shards retrying now, as JSON in
    /// `retrying` (removed while none is).
    pub fn report(&self) -> Report {
        let shards = self.snapshot();
        let json = (!shards.is_empty()).then(|| AttributeValue::S(serde_json::to_string(&shards).expect("retry states serialize")));
        vec![(RETRYING, json)]
    }
}

/// The heartbeat row's attribute that lists the worker's shards retrying.
const RETRYING: &str = "retrying";

impl Retrying {
    /// The shards `heartbeat`'s worker reports retrying, by shard id.
    pub fn reported(heartbeat: &Heartbeat) -> BTreeMap<String, Retrying> {
        heartbeat.text(RETRYING).and_then(|json| serde_json::from_str(json).ok()).unwrap_or_default()
    }
}

