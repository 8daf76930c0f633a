//! The census a plan starts from: the ready leases sorted by who may have
//! them, as this worker sees the table ([`View`]), and the target.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tokio::time::Instant;

use super::{is_ready, target, ExpiryTracker, Fleet, TakeSettings};
use crate::lease::{Lease, LeaseKey};

/// What this worker holds and what it could hold, as the leases were read.
pub struct View<'a> {
    /// This worker's id.
    pub me: &'a str,
    /// Leases this worker is processing now (a row naming `me` but not held
    /// is left over from an earlier run, and is taken back first).
    pub held: &'a HashSet<LeaseKey>,
    /// Held leases already being given back.
    pub releasing: &'a HashSet<LeaseKey>,
    /// The live and dead workers.
    pub fleet: &'a Fleet,
    /// Live Java KCL 3.x workers ([`super::live_kcl3_workers`]): they get their
    /// share from their leader, out of the leases kcl-host gives back.
    pub kcl3_workers: &'a BTreeSet<String>,
    /// When each lease was last seen to change.
    pub tracker: &'a ExpiryTracker,
    /// The time of the scan.
    pub now: Instant,
    /// Take every free or expired lease, whatever the target: a watcher
    /// covering a worker that died or stopped while the others read the
    /// fleet seldom ([`crate::lease::watch::FleetWatch::covers_departures`]).
    pub cover: bool,
}

/// The ready leases sorted by who may have them.
pub(super) struct Census<'a> {
    pub ready: usize,
    /// Held and not being released.
    pub mine: usize,
    pub releasing: usize,
    pub leftover: Vec<&'a Lease>,
    pub expired: Vec<&'a Lease>,
    pub free: Vec<&'a Lease>,
    /// Unexpired leases of other owners.
    pub others: BTreeMap<&'a str, Vec<&'a Lease>>,
    /// Other live workers: owners of unexpired leases and heartbeating kcl-host workers.
    pub workers: BTreeSet<&'a str>,
    pub target: usize,
}

impl<'a> Census<'a> {
    pub(super) fn new(leases: &'a [Lease], view: &View<'a>, settings: &TakeSettings) -> Self {
        let by_key: HashMap<&str, &Lease> = leases.iter().map(|l| (l.key.as_str(), l)).collect();
        let mut census = Census {
            ready: 0,
            mine: 0,
            releasing: 0,
            leftover: Vec::new(),
            expired: Vec::new(),
            free: Vec::new(),
            others: BTreeMap::new(),
            workers: view.fleet.live.iter().chain(view.kcl3_workers).map(String::as_str).filter(|w| *w != view.me).collect(),
            target: 0,
        };
        for lease in leases.iter().filter(|l| is_ready(l, &by_key)) {
            census.ready += 1;
            let owner = lease.owner.as_deref();
            if view.releasing.contains(&lease.key) {
                census.releasing += 1;
            } else if view.held.contains(&lease.key) {
                census.mine += 1;
            } else if lease.is_owned_by(view.me) {
                census.leftover.push(lease);
            } else if owner.is_none() {
                census.free.push(lease);
            } else if owner.and_then(|o| view.fleet.dead.get(o)).is_some_and(|dead| lease.owner_heartbeat.is_none_or(|h| h <= *dead))
                // A kcl-host worker's lease never expires by its counter: its
                // heartbeat may be what renews it.
                || (owner.is_some_and(|o| !view.fleet.live.contains(o) && !view.fleet.dead.contains_key(o))
                    && view.tracker.is_expired(lease, view.now, settings.failover_time))
            {
                census.expired.push(lease);
            } else {
                let owner = owner.expect("owned");
                census.others.entry(owner).or_default().push(lease);
                census.workers.insert(owner);
            }
        }
        census.target = target(census.ready, census.workers.len() + 1, settings.max_leases);
        census
    }
}

