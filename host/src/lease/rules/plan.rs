//! The plans: what to take and steal ([`plan_take`]), and how much to give
//! back ([`plan_release`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

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
    let Census { leftover, mut expired, mut free, others, mine, target, kcl_host, releasing, .. } = Census::new(leases, view, settings);
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
    if need == 0 && plan.take.is_empty() && mine == target && releasing == 0 && !view.cover {
        // The other half of a swap of streams, above the target.
        plan.take.extend(swap_in(&free, view, &others, &kcl_host, target).cloned());
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

/// The held leases this worker should give back: as many as it holds above
/// the target, but only as many as the live workers below the target cannot
/// fill from free, expired or already released leases (so nothing is given
/// back that nobody would take); which ones, [`pick_release`] says, for the
/// streams those workers hold fewest of.
pub fn plan_release(leases: &[Lease], view: &View<'_>, settings: &TakeSettings) -> Vec<LeaseKey> {
    let census = Census::new(leases, view, settings);
    let excess = census.mine.saturating_sub(census.target);
    if excess == 0 {
        return Vec::new();
    }
    let holdings = |w: &str| census.others.get(w).map_or(&[][..], Vec::as_slice);
    let short: Vec<&str> = census.workers.iter().copied().filter(|w| holdings(w).len() < census.target).collect();
    let shortfall: usize = short.iter().map(|w| census.target - holdings(w).len()).sum();
    let available = census.free.len() + census.expired.len() + census.releasing;
    let count = excess.min(shortfall.saturating_sub(available));
    let short: Vec<StreamCounts<'_>> = short.into_iter().map(|w| count_by_stream(holdings(w).iter().map(|l| &l.key))).collect();
    pick_release(view.held.difference(view.releasing).cloned().collect(), count, &short)
}

/// A held lease to give back so that the streams of a multi-stream table
/// spread evenly over the workers, or `None`. Counts alone balance the
/// fleet, and a worker taking free leases spreads them over its streams;
/// but a restart can still leave one worker with two more of stream `s` and
/// another with two more of `t` (each took what was free). The first gives
/// one of `s` back while it is at the target, nothing is free, expired or
/// on its way back, and a kcl-host worker holds two fewer of `s` and two
/// more of another stream; that worker takes it above its target
/// ([`plan_take`]) and gives one of its `t` back, which this one takes. Each
/// swap narrows the gaps, so the moves end. A table of one stream never
/// swaps. A worker gets only a stream it `reads` (worker, stream part).
pub fn plan_swap(leases: &[Lease], view: &View<'_>, settings: &TakeSettings, reads: &dyn Fn(&str, &str) -> bool) -> Option<LeaseKey> {
    let census = Census::new(leases, view, settings);
    let steady = census.free.is_empty() && census.expired.is_empty() && census.leftover.is_empty() && census.releasing == 0;
    if !steady || census.mine != census.target || view.cover {
        return None;
    }
    let held: Vec<&LeaseKey> = view.held.iter().filter(|k| !view.releasing.contains(*k)).collect();
    let mine = count_by_stream(held.iter().copied());
    let give = census.others.iter().filter(|(owner, _)| census.kcl_host.contains(**owner)).find_map(|(owner, theirs)| {
        let theirs = count_by_stream(theirs.iter().map(|l| &l.key));
        let readable = mine.keys().filter(|s| reads(owner, s));
        let (stream, lead) = readable.map(|s| (*s, gap(&mine, &theirs, s))).max_by_key(|(s, lead)| (*lead, std::cmp::Reverse(*s)))?;
        let they_have_more = theirs.keys().any(|t| gap(&theirs, &mine, t) >= 2);
        (lead >= 2 && they_have_more).then_some(stream)
    })?;
    held.into_iter().filter(|k| stream_of(k) == give).max().cloned()
}

/// The other half of a swap ([`plan_swap`]): at the target, a free lease
/// that a kcl-host worker below the target gave back, of a stream it still
/// holds more of than this worker, while this worker holds two more than it
/// of another stream (given back by the next release, [`plan_release`]).
fn swap_in<'a>(free: &[&'a Lease], view: &View<'_>, others: &BTreeMap<&str, Vec<&Lease>>, kcl_host: &BTreeSet<&str>, target: usize) -> Option<&'a Lease> {
    let mine = count_by_stream(view.held.iter().filter(|k| !view.releasing.contains(*k)));
    others.iter().filter(|(owner, theirs)| kcl_host.contains(**owner) && theirs.len() < target).find_map(|(_, theirs)| {
        let theirs = count_by_stream(theirs.iter().map(|l| &l.key));
        if !mine.keys().any(|t| gap(&mine, &theirs, t) >= 2) {
            return None;
        }
        free.iter().copied().filter(|l| gap(&theirs, &mine, stream_of(&l.key)) >= 1).min_by_key(|l| &l.key)
    })
}

/// How many leases of each stream a worker holds.
type StreamCounts<'k> = BTreeMap<&'k str, usize>;

fn count_by_stream<'k>(keys: impl IntoIterator<Item = &'k LeaseKey>) -> StreamCounts<'k> {
    let mut counts = BTreeMap::new();
    for key in keys {
        *counts.entry(stream_of(key)).or_default() += 1;
    }
    counts
}

/// How many more leases of `stream` `a` holds than `b` (0 if fewer).
fn gap(a: &StreamCounts<'_>, b: &StreamCounts<'_>, stream: &str) -> usize {
    let of = |counts: &StreamCounts<'_>| counts.get(stream).copied().unwrap_or(0);
    of(a).saturating_sub(of(b))
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
fn spread_over_streams<'a>(candidates: Vec<&'a Lease>, held: &'a HashSet<LeaseKey>) -> Vec<&'a Lease> {
    let mut count = count_by_stream(held);
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
        *count.entry(stream).or_default() += 1;
    }
    ordered
}

/// Which `count` of `candidates` (held leases not being given back) to give
/// back, for workers below the target holding `short`: each next one from
/// the stream where this worker's candidates left most exceed what the
/// short worker holding fewest of it has (then the stream with the most
/// candidates left), the highest key first. So a worker keeps a share of
/// every stream, and gives each stream to whoever lacks it.
pub(super) fn pick_release(candidates: Vec<LeaseKey>, count: usize, short: &[StreamCounts<'_>]) -> Vec<LeaseKey> {
    let mut by_stream: BTreeMap<String, Vec<LeaseKey>> = BTreeMap::new();
    for key in candidates {
        by_stream.entry(stream_of(&key).to_owned()).or_default().push(key);
    }
    for keys in by_stream.values_mut() {
        keys.sort();
    }
    let fewest = |stream: &str| short.iter().map(|counts| counts.get(stream).copied().unwrap_or(0)).min().unwrap_or(0);
    let mut release = Vec::with_capacity(count);
    while release.len() < count {
        let lead = |(stream, keys): &(&String, &mut Vec<LeaseKey>)| (keys.len().saturating_sub(fewest(stream)), keys.len());
        let Some((_, keys)) = by_stream.iter_mut().filter(|(_, keys)| !keys.is_empty()).max_by_key(lead) else { break };
        release.extend(keys.pop());
    }
    release
}
