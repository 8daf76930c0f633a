//! The plans: what to take and steal ([`plan_take`]), and how much to give
//! back ([`plan_release`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::census::{Census, View};
use super::TakeSettings;
use crate::lease::{Lease, LeaseKey};

/// What one take pass should try, as the leases were read.
#[derive(Debug, Default, PartialEq)]
pub struct TakePlan {
    /// Free or expired leases.
    pub take: Vec<Lease>,
    /// Leases of live workers above the target.
    pub steal: Vec<Lease>,
    /// This worker is short and another is above the target: leases should
    /// be given back (or become stealable) soon, so look again shortly.
    pub short: bool,
}

/// Decides which leases this worker should take in this pass.
pub fn plan_take(leases: &[Lease], view: &View<'_>, settings: &TakeSettings, rng: &mut fastrand::Rng) -> TakePlan {
    let Census { leftover, mut expired, mut free, others, mine, target, kcl_host, .. } = Census::new(leases, view, settings);
    let cap = if view.cover { settings.max_leases } else { target };
    let mut need = cap.saturating_sub(mine);

    // Spread workers that start together over different leases.
    rng.shuffle(&mut expired);
    rng.shuffle(&mut free);
    let mut plan = TakePlan::default();
    // This worker's own rows are taken back whatever the target (nobody
    // else would take a live worker's lease); a later pass gives back any
    // above the target.
    for lease in leftover {
        plan.take.push(lease.clone());
        need = need.saturating_sub(1);
    }
    expired.append(&mut free);
    for lease in spread_over_streams(expired, view.held) {
        if need == 0 {
            return plan;
        }
        plan.take.push(lease.clone());
        need -= 1;
    }

    plan.short = others.values().any(|leases| leases.len() > target);
    // kcl-host workers above the target release leases themselves.
    let victims = others.iter().filter(|(owner, _)| !kcl_host.contains(**owner));
    let Some((_, victims)) = victims.max_by_key(|(owner, leases)| (leases.len(), std::cmp::Reverse(**owner))) else {
        return plan;
    };
    let most = victims.len();
    let steal = if most > target {
        need.min(most - target)
    } else if most == target && need > 1 {
        1
    } else {
        0
    };
    let mut victims = victims.clone();
    rng.shuffle(&mut victims);
    plan.steal = victims.into_iter().take(steal.min(settings.max_leases_to_steal)).cloned().collect();
    plan
}

/// How many held leases this worker should give back: what it holds above
/// the target, but only as many as the live workers below the target cannot
/// fill from free, expired or already released leases (so nothing is given
/// back that nobody would take).
pub fn plan_release(leases: &[Lease], view: &View<'_>, settings: &TakeSettings) -> usize {
    let census = Census::new(leases, view, settings);
    let excess = census.mine.saturating_sub(census.target);
    if excess == 0 {
        return 0;
    }
    let shortfall: usize = census
        .workers
        .iter()
        .map(|w| census.target.saturating_sub(census.others.get(w).map_or(0, Vec::len)))
        .sum();
    let available = census.free.len() + census.expired.len() + census.releasing;
    excess.min(shortfall.saturating_sub(available))
}

/// Whether this worker holds more than the target.
pub fn above_target(leases: &[Lease], view: &View<'_>, settings: &TakeSettings) -> bool {
    let census = Census::new(leases, view, settings);
    census.mine > census.target
}


/// The stream a lease key belongs to, for spreading: its stream part, or
/// "" for the one stream of a single-stream table.
fn stream_of(key: &LeaseKey) -> &str {
    key.stream_part().unwrap_or("")
}

/// `candidates` in the order to take them so that a worker's leases spread
/// over the streams of a multi-stream table: each next one from the stream
/// it holds (or has chosen) fewest of, the given order kept within a stream.
fn spread_over_streams<'a>(candidates: Vec<&'a Lease>, held: &HashSet<LeaseKey>) -> Vec<&'a Lease> {
    let mut count: HashMap<String, usize> = HashMap::new();
    for key in held {
        *count.entry(stream_of(key).to_owned()).or_default() += 1;
    }
    let mut by_stream: BTreeMap<&str, std::collections::VecDeque<&'a Lease>> = BTreeMap::new();
    for lease in &candidates {
        by_stream.entry(stream_of(&lease.key)).or_default().push_back(lease);
    }
    let mut ordered = Vec::with_capacity(candidates.len());
    while let Some(stream) = by_stream.keys().copied().min_by_key(|stream| count.get(*stream).copied().unwrap_or(0)) {
        let queue = by_stream.get_mut(stream).expect("a key of the map");
        ordered.extend(queue.pop_front());
        if queue.is_empty() {
            by_stream.remove(stream);
        }
        *count.entry(stream.to_owned()).or_default() += 1;
    }
    ordered
}

/// Which `count` of `candidates` (held leases not being given back) to give
/// back: each next one from the stream with the most candidates left, the
/// highest key first, so a worker keeps a share of every stream.
pub fn pick_release(candidates: Vec<LeaseKey>, count: usize) -> Vec<LeaseKey> {
    let mut by_stream: BTreeMap<String, Vec<LeaseKey>> = BTreeMap::new();
    for key in candidates {
        by_stream.entry(stream_of(&key).to_owned()).or_default().push(key);
    }
    for keys in by_stream.values_mut() {
        keys.sort();
    }
    let mut release = Vec::with_capacity(count);
    while release.len() < count {
        let Some(keys) = by_stream.values_mut().filter(|keys| !keys.is_empty()).max_by_key(|keys| keys.len()) else { break };
        release.extend(keys.pop());
    }
    release
}
