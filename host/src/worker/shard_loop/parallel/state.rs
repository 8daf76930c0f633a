//! State when several instances process a shard (`--parallelism` over 1).
//!
//! An instance keeps only the state of its call's partition keys, which no
//! other instance has at the same time. After each call it hands its
//! changes over: they become the call's *change set*, tagged with the
//! ordinals of the call's records. A set is committed with the first host
//! checkpoint that covers every one of its records, and the host never
//! writes a checkpoint that covers only some of a set's records (it writes
//! a lower one): after a crash the records after the checkpoint come again
//! and no change is counted twice or lost. Until a set is committed, reads
//! of its keys are answered from it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex as StdMutex};

use crate::runtime::{StateCache, StateChanges, StateFuture, StateSource, MAX_CHANGED_BYTES};
use crate::state::ShardStateSource;

/// What one finished call changed, not committed yet.
struct ChangeSet {
    /// The smallest and largest ordinal of the call's records.
    first: u64,
    last: u64,
    changes: StateChanges,
}

/// Bytes of keys and values in `changes`.
fn size(changes: &StateChanges) -> usize {
    changes.iter().map(|(key, value)| key.len() + value.as_ref().map_or(0, Vec::len)).sum()
}

/// Notes `changes` as committed values in `cache`.
fn put_all(cache: &mut StateCache, changes: StateChanges) {
    for (key, value) in changes {
        cache.put(key, value);
    }
}

/// A shard's state across its lanes: the change sets of finished calls,
/// read before the state table, and the committed values read since.
pub(super) struct LaneStates {
    table: ShardStateSource,
    inner: StdMutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// In the order their calls finished (a key's calls finish in its order).
    sets: VecDeque<ChangeSet>,
    /// Bytes of keys and values in `sets`.
    bytes: usize,
    committed: StateCache,
}

impl LaneStates {
    /// No change yet; committed values are read from `table`.
    pub(super) fn new(table: ShardStateSource) -> Self {
        Self { table, inner: StdMutex::default() }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("not poisoned")
    }

    /// A call with the records `ordinals` (in order) returned ok, having
    /// made `changes`.
    pub(super) fn finished(&self, ordinals: &[u64], changes: StateChanges) {
        if let (Some(&first), Some(&last), false) = (ordinals.first(), ordinals.last(), changes.is_empty()) {
            let mut inner = self.inner();
            inner.bytes += size(&changes);
            inner.sets.push_back(ChangeSet { first, last, changes });
        }
    }

    /// The highest checkpoint at or below `done_below` (every record below
    /// it is done) that covers each change set wholly or not at all.
    pub(super) fn checkpoint_below(&self, done_below: u64) -> u64 {
        let inner = self.inner();
        let mut end = done_below;
        // Lowering it below one set can cut another: until none is cut.
        while let Some(cut) = inner.sets.iter().filter(|set| set.first < end && set.last >= end).map(|set| set.first).min() {
            end = cut;
        }
        end
    }

    /// The changes of every set wholly below `end`, merged in order.
    pub(super) fn changes_below(&self, end: u64) -> StateChanges {
        let mut merged = StateChanges::new();
        for set in self.inner().sets.iter().filter(|set| set.last < end) {
            merged.extend(set.changes.iter().map(|(key, value)| (key.clone(), value.clone())));
        }
        merged
    }

    /// The sets wholly below `end` were committed: their values are read
    /// as committed ones from now on.
    pub(super) fn committed_below(&self, end: u64) {
        let mut inner = self.inner();
        let Inner { sets, bytes, committed } = &mut *inner;
        sets.retain_mut(|set| {
            let below = set.last < end;
            if below {
                *bytes -= size(&set.changes);
                put_all(committed, std::mem::take(&mut set.changes));
            }
            !below
        });
    }

    /// Whether the uncommitted changes hold more than one instance may
    /// keep between checkpoints: no call starts until a commit (the state
    /// table does not answer) brings them under it.
    pub(super) fn full(&self) -> bool {
        self.inner().bytes > MAX_CHANGED_BYTES
    }

    /// `changes` were committed outside any set (a window's close): they
    /// are what is read from now on.
    pub(super) fn committed(&self, changes: StateChanges) {
        put_all(&mut self.inner().committed, changes);
    }

    /// The newest value of `key` this shard knows without a read: its
    /// latest uncommitted change, else its cached committed value.
    fn known(inner: &mut Inner, key: &str) -> Option<Option<Vec<u8>>> {
        match inner.sets.iter().rev().find_map(|set| set.changes.get(key)) {
            Some(value) => Some(value.clone()),
            None => inner.committed.has(key).then(|| inner.committed.get(key)),
        }
    }
}

/// What one lane's instance reads: the changes its current call noted at
/// its own checkpoints (kept by the lane until the call ends), then the
/// shard's [`LaneStates`].
pub(super) struct LaneSource {
    pub(super) noted: Arc<StdMutex<StateChanges>>,
    pub(super) shard: Arc<LaneStates>,
}

impl StateSource for LaneSource {
    fn read<'a>(&'a self, keys: &'a [String]) -> StateFuture<'a, Result<Vec<Option<Vec<u8>>>, String>> {
        Box::pin(async move {
            let mut values: Vec<Option<Option<Vec<u8>>>> = {
                let noted = self.noted.lock().expect("not poisoned");
                let mut inner = self.shard.inner();
                keys.iter().map(|key| noted.get(key).cloned().or_else(|| LaneStates::known(&mut inner, key))).collect()
            };
            let missing: Vec<String> = keys.iter().zip(&values).filter(|(_, value)| value.is_none()).map(|(key, _)| key.clone()).collect();
            self.shard.table.served_from_memory(keys.len() - missing.len());
            if !missing.is_empty() {
                // A key in no set has no change on its way: the table holds its value.
                let mut read = self.shard.table.read(&missing).await?.into_iter();
                let mut inner = self.shard.inner();
                for (key, value) in keys.iter().zip(values.iter_mut()).filter(|(_, value)| value.is_none()) {
                    let found = read.next().expect("one value per key read");
                    inner.committed.put(key.clone(), found.clone());
                    *value = Some(found);
                }
            }
            Ok(values.into_iter().map(|value| value.expect("every key answered")).collect())
        })
    }

    fn served_from_memory(&self, keys: usize) {
        self.shard.table.served_from_memory(keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(pairs: &[(&str, &str)]) -> StateChanges {
        pairs.iter().map(|(k, v)| (k.to_string(), Some(v.as_bytes().to_vec()))).collect()
    }

    /// No change yet, and a state table that cannot be reached: a read
    /// of it fails the test.
    fn states() -> LaneStates {
        let config = aws_sdk_dynamodb::Config::builder().behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest()).build();
        let table = Arc::new(crate::state::StateTable::new(aws_sdk_dynamodb::Client::from_conf(config), "app"));
        let metrics = Arc::new(crate::metrics::Metrics::new("app", "worker")).shard("s", &"shard-0".into());
        LaneStates::new(ShardStateSource { table, stream: "s".into(), metrics })
    }

    #[test]
    fn the_checkpoint_never_cuts_a_finished_calls_changes() {
        let states = states();
        states.finished(&[0, 2, 3], changes(&[("a", "1")]));
        states.finished(&[1, 5], changes(&[("b", "1")]));
        states.finished(&[6, 12], changes(&[("c", "1")]));
        states.finished(&[7, 8], StateChanges::new());
        // Records 9 to 11 are in calls still running.
        assert_eq!(states.checkpoint_below(9), 6, "c's call has 6 and 12: the checkpoint stays below its first record");
        assert_eq!(states.checkpoint_below(13), 13);
        assert_eq!(states.changes_below(6), changes(&[("a", "1"), ("b", "1")]));
        states.committed_below(6);
        assert_eq!(states.changes_below(u64::MAX), changes(&[("c", "1")]), "c's call is not below 6");
        states.committed_below(13);
        assert!(states.changes_below(u64::MAX).is_empty());
    }

    #[test]
    fn lowering_below_one_call_can_cut_another_and_is_lowered_again() {
        let states = states();
        states.finished(&[2, 8], changes(&[("a", "1")]));
        states.finished(&[5, 12], changes(&[("b", "1")]));
        assert_eq!(states.checkpoint_below(10), 2, "below b's 5 cuts a's 2..=8: below 2");
    }

    #[tokio::test]
    async fn reads_see_the_call_s_noted_changes_then_the_newest_set_then_committed_values() {
        let shard = Arc::new(states());
        shard.finished(&[0], changes(&[("a", "1"), ("b", "1")]));
        shard.finished(&[1], changes(&[("a", "2")]));
        let noted = Arc::new(StdMutex::new(changes(&[("b", "3")])));
        let source = LaneSource { noted, shard: shard.clone() };
        let keys = ["a".to_string(), "b".to_string()];
        let read = source.read(&keys).await.unwrap();
        assert_eq!(read, vec![Some(b"2".to_vec()), Some(b"3".to_vec())]);
        shard.committed_below(2);
        source.noted.lock().unwrap().clear();
        let read = source.read(&keys).await.unwrap();
        assert_eq!(read, vec![Some(b"2".to_vec()), Some(b"1".to_vec())], "committed values, from memory: no table is reached");
    }
}
