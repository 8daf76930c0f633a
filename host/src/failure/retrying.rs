//! The shards a worker is retrying, as its heartbeat row reports them to
//! `status` (and the metrics count them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::lease::board::{self, ShardBoard};
use crate::lease::heartbeat::Heartbeat;

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
pub type RetryBoard = ShardBoard<Retrying>;

/// The heartbeat row's attribute that lists the worker's shards retrying.
const RETRYING: &str = "retrying";

impl Retrying {
    /// An empty board of a worker's shards retrying.
    pub fn board() -> RetryBoard {
        ShardBoard::new(RETRYING)
    }

    /// The shards `heartbeat`'s worker reports retrying, by shard id.
    pub fn reported(heartbeat: &Heartbeat) -> BTreeMap<String, Retrying> {
        board::reported(heartbeat, RETRYING)
    }
}
