//! The calls each shard run by several instances (`--parallelism`) has in
//! flight, as the worker's heartbeat row reports them to `status`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::lease::board::{self, ShardBoard};
use crate::lease::heartbeat::Heartbeat;

/// A parallel shard's instances, as its last change left them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// Instances processing the shard.
    pub instances: usize,
    /// Calls running.
    pub calls: usize,
    /// Records queued or in a call for the busiest instance beyond the
    /// least busy: how far the slowest trails the fastest.
    pub lag_records: usize,
}

/// The parallel shards of a worker, as its heartbeat reports them.
pub type InFlightBoard = ShardBoard<InFlight>;

/// The heartbeat row's attribute that lists them.
const IN_FLIGHT: &str = "inFlight";

impl InFlight {
    /// An empty board of a worker's parallel shards.
    pub fn board() -> InFlightBoard {
        ShardBoard::new(IN_FLIGHT)
    }

    /// The parallel shards `heartbeat`'s worker reports, by shard id.
    pub fn reported(heartbeat: &Heartbeat) -> BTreeMap<String, InFlight> {
        board::reported(heartbeat, IN_FLIGHT)
    }
}
