//! The leases this worker gave back to spread the streams
//! ([`crate::lease::rules::plan_swap`]), and whether swapping is worth trying.
//!
//! A swap gives a stream only to a worker whose heartbeat row lists it
//! among its streams (or does not say: an older kcl-host). A lease given
//! back for a swap is meant for another worker, so this one does not take
//! it again for a failover time. If it is still free then, no worker took
//! it: this worker takes it back and tries no swap again until the fleet
//! changes, rather than give it away every failover time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::heartbeat::Heartbeat;
use crate::lease::rules::TakePlan;
use crate::lease::{Lease, LeaseKey};

/// This worker's swaps under way, and what it knows of the others' streams.
#[derive(Debug, Default)]
pub struct Swaps {
    /// Leases given back for a swap, with when they were last seen held by
    /// this worker (a lease goes back only after its consumer checkpoints).
    given: HashMap<LeaseKey, Instant>,
    /// A swap found no taker since the fleet last changed: none is tried.
    failed: bool,
    /// The streams each worker's heartbeat row lists.
    streams: BTreeMap<String, BTreeSet<String>>,
}

impl Swaps {
    /// Whether a swap may be tried now.
    pub fn may_try(&self) -> bool {
        self.given.is_empty() && !self.failed
    }

    /// Notes the streams the heartbeat rows list.
    pub fn read_streams(&mut self, heartbeats: &[Heartbeat]) {
        self.streams = heartbeats.iter().filter_map(|h| Some((h.worker.clone(), h.streams()?))).collect();
    }

    /// Whether `worker` reads `stream` (a lease key's stream part), as far
    /// as its heartbeat row says.
    pub fn reads(&self, worker: &str, stream: &str) -> bool {
        self.streams.get(worker).is_none_or(|streams| streams.contains(stream))
    }

    /// The fleet changed: a swap that found no taker may find one now.
    pub fn fleet_changed(&mut self) {
        self.failed = false;
    }

    /// Notes that `key` goes back for a swap.
    pub fn give(&mut self, key: LeaseKey, now: Instant) {
        self.given.insert(key, now);
    }

    /// Follows the swaps in a fresh read of the table: a lease still owned
    /// by `me` is on its way back; one taken by anyone made its swap; one
    /// free for `failover_time` found no taker, and swapping stops until
    /// the fleet changes.
    pub fn observe(&mut self, leases: &[Lease], me: &str, failover_time: Duration, now: Instant) {
        let failed = &mut self.failed;
        self.given.retain(|key, since| match leases.iter().find(|l| &l.key == key) {
            Some(lease) if lease.is_owned_by(me) => {
                *since = now;
                true
            }
            Some(lease) if lease.owner.is_none() => {
                let waiting = now.duration_since(*since) < failover_time;
                if !waiting {
                    tracing::info!(shard = %key, "no worker took the lease given back to spread the streams: taking it again, and swapping no more until the fleet changes");
                    *failed = true;
                }
                waiting
            }
            _ => false,
        });
    }

    /// Leaves out of `plan` the leases given back for a swap that may
    /// still find their taker.
    pub fn keep_for_takers(&self, plan: &mut TakePlan) {
        plan.take.retain(|lease| !self.given.contains_key(&lease.key));
    }
}
