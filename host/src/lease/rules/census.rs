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
    /// When the heartbeat read that showed `fleet` was sent. A kcl-host
    /// worker's row missing from it says the worker left only for leases
    /// this worker saw it hold before then. `None` for a worker that reads
    /// no heartbeats: it judges every owner by its counter, as Java KCL does.
    pub fleet_read_sent: Option<Instant>,
    /// The leases this worker may take (those of the streams it reads);
    /// every lease when `None`. A live worker's lease outside it still
    /// counts toward the shares: while a fleet restarts with another list
    /// of streams, its workers see different tables.
    pub scope: Option<&'a (dyn Fn(&LeaseKey) -> bool + Send + Sync)>,
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
    /// Other owners known to be kcl-host workers (by their heartbeat row, or
    /// by a lease row): they give leases back themselves, so none is stolen.
    pub kcl_host: BTreeSet<&'a str>,
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
            kcl_host: BTreeSet::new(),
        };
        let mut stopped: BTreeSet<&str> = BTreeSet::new();
        for lease in leases.iter().filter(|l| is_ready(l, &by_key)) {
            let owner = lease.owner.as_deref();
            if view.scope.is_some_and(|scope| !scope(&lease.key)) {
                if owner.is_some_and(|o| o != view.me && !is_expired(lease, o, view, settings)) {
                    census.ready += 1;
                }
                continue;
            }
            census.ready += 1;
            if view.releasing.contains(&lease.key) {
                census.releasing += 1;
            } else if view.held.contains(&lease.key) {
                census.mine += 1;
            } else if lease.is_owned_by(view.me) {
                census.leftover.push(lease);
            } else if owner.is_none() {
                census.free.push(lease);
            } else if owner.is_some_and(|o| is_expired(lease, o, view, settings)) {
                census.expired.push(lease);
                stopped.extend(owner.filter(|o| view.kcl3_workers.contains(*o)));
            } else {
                let owner = owner.expect("owned");
                census.others.entry(owner).or_default().push(lease);
                census.workers.insert(owner);
                if view.fleet.live.contains(owner) || lease.is_owned_by_kcl_host() {
                    census.kcl_host.insert(owner);
                }
            }
        }
        // A Java KCL 3.x worker renews all its leases together, and one that
        // stops leaves them owned: once one expires it stopped, whatever
        // its metrics row (young for up to a minute) says.
        census.workers.retain(|w| !stopped.contains(w) || census.others.contains_key(w));
        census.target = target(census.ready, census.workers.len() + 1, settings.max_leases);
        census
    }
}

/// Whether `owner`'s `lease` may be taken without stealing.
fn is_expired(lease: &Lease, owner: &str, view: &View<'_>, settings: &TakeSettings) -> bool {
    if let Some(dead) = view.fleet.dead.get(owner) {
        // Judged dead on its heartbeat, unless the row records a later beat.
        return lease.owner_heartbeat.is_none_or(|h| h <= *dead);
    }
    if view.fleet.live.contains(owner) {
        // A live kcl-host worker's lease never expires by its counter: its
        // heartbeat may be what renews it.
        return false;
    }
    let stale = view.tracker.is_expired(lease, view.now, settings.failover_time);
    if !lease.is_owned_by_kcl_host() {
        // Java KCL: the counter is the renewal.
        return stale;
    }
    // A kcl-host worker whose heartbeat row this worker has not read (it
    // joined after the last read, or the reads fail): in heartbeat mode its
    // counter stands still, so that is no sign of death. A worker writes its
    // row before it takes a lease, so only a read sent after this counter
    // was first seen, without the row, shows it left (stopped, or dead and
    // forgotten).
    let seen = view.tracker.first_seen(&lease.key, lease.counter);
    match view.fleet_read_sent {
        Some(read) => stale && seen.is_some_and(|seen| seen < read),
        None => stale,
    }
}
