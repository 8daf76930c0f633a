//! The guest's `state` import: values per key, read through a per-instance
//! cache, changed only in memory until the next checkpoint commits the
//! changes with it (the [`CheckpointSink`](super::CheckpointSink) writes
//! both at once).
//!
//! Where committed values come from is the caller's [`StateSource`]: the
//! state table in `kcl-host run`, a map in `kcl-host replay`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use super::bindings::v0_4::kcl::processor::state::StateError;
use crate::records::kpl::{hash_key, HashRange};
use crate::records::Batch;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value, in bytes: a DynamoDB item holds 400 KB with its key and
/// bookkeeping.
pub const MAX_VALUE_BYTES: usize = 390_000;
/// Most bytes of keys and values changed between two checkpoints: what an
/// instance may keep in the host's memory until its next checkpoint.
/// (Changes beyond one DynamoDB transaction are committed through a log:
/// `state::log`.)
pub const MAX_CHANGED_BYTES: usize = 64 << 20;
/// Keys starting with this are the host's (a window's index); a
/// processor's are refused.
pub const HOST_KEY_PREFIX: &str = "~kcl/";
/// Most bytes of committed values an instance keeps cached.
const CACHE_BYTES: usize = 16 << 20;

/// The future a [`StateSource`] returns.
pub type StateFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a shard's committed state is read.
pub trait StateSource: Send + Sync {
    /// The committed values of `keys`, in order (strongly consistent
    /// reads); a message saying what failed otherwise.
    fn read<'a>(&'a self, keys: &'a [String]) -> StateFuture<'a, Result<Vec<Option<Vec<u8>>>, String>>;

    /// `keys` keys were answered from the instance's memory (its cache or
    /// its own changes), with no read: for the metrics.
    fn served_from_memory(&self, keys: usize) {
        let _ = keys;
    }
}

/// The changes since the last checkpoint: key → its new value, or `None`
/// for a key deleted.
pub type StateChanges = BTreeMap<String, Option<Vec<u8>>>;

/// One instance's view of its shard's state.
pub struct KeyedState {
    /// Where committed values are read, and the hash-key range keys must
    /// fall in (none: any key); or why state is not available here.
    access: Result<(Arc<dyn StateSource>, Option<HashRange>), String>,
    cache: Cache,
    pending: StateChanges,
    pending_bytes: usize,
    /// The partition keys of the batch being delivered (its column and
    /// ends): a key whose records came to this shard belongs to it, even
    /// when its MD5 hash says otherwise — they were put with an explicit
    /// hash key, which GetRecords does not return.
    batch_keys: (String, Vec<u32>),
    /// Keys taken without a check: a closing window's (checked when first changed).
    admitted: HashSet<String>,
    /// Only the partition keys of the batch being delivered are taken: an
    /// instance of several on one shard (`--parallelism`), whose other
    /// keys may be in another instance's call at the same moment.
    call_keys_only: bool,
    /// The batch's partition keys as a set, made on first use: with
    /// `call_keys_only` every new key is looked up in it, where a scan of the
    /// batch would cost a call of many keys quadratic time.
    batch_key_set: std::sync::OnceLock<HashSet<String>>,
}

impl KeyedState {
    /// State read from `source`, for keys whose hash falls in `range`.
    pub fn new(source: Arc<dyn StateSource>, range: Option<HashRange>) -> Self {
        Self::with_access(Ok((source, range)))
    }

    /// State read from `source` for the partition keys of the records each
    /// call is given, and no other: one lane's of a shard's several
    /// instances, which hands its changes over after each call
    /// ([`Self::take_changes`]).
    pub fn of_call_keys(source: Arc<dyn StateSource>) -> Self {
        Self { call_keys_only: true, ..Self::new(source, None) }
    }

    /// No state: every call fails with `unavailable(reason)`.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::with_access(Err(reason.into()))
    }

    fn with_access(access: Result<(Arc<dyn StateSource>, Option<HashRange>), String>) -> Self {
        Self { access, cache: Cache::default(), pending: StateChanges::new(), pending_bytes: 0, batch_keys: Default::default(), admitted: HashSet::new(), call_keys_only: false, batch_key_set: Default::default() }
    }

    /// Notes the batch about to be delivered: its records' partition keys
    /// are this shard's keys.
    pub(crate) fn placing(&mut self, batch: &Batch) {
        self.admitted.clear();
        if self.access.is_err() {
            return;
        }
        self.batch_key_set = Default::default();
        let (keys, ends) = &mut self.batch_keys;
        keys.clone_from(&batch.partition_keys);
        ends.clone_from(&batch.partition_key_ends);
    }

    /// Whether `key` is the partition key of a record of the batch being delivered.
    fn in_batch(&self, key: &str) -> bool {
        if self.call_keys_only {
            return self.batch_key_set.get_or_init(|| self.batch_partition_keys().map(str::to_owned).collect()).contains(key);
        }
        self.batch_partition_keys().any(|k| k == key)
    }

    /// The partition keys of the batch being delivered, one per record.
    fn batch_partition_keys(&self) -> impl Iterator<Item = &str> {
        let (keys, ends) = &self.batch_keys;
        let starts = std::iter::once(0).chain(ends.iter().map(|&end| end as usize));
        starts.zip(ends.iter()).filter_map(|(start, &end)| keys.get(start..end as usize))
    }

    /// Takes `keys` without checking where they belong: a closing window's.
    pub(crate) fn admit(&mut self, keys: &[String]) {
        self.admitted = keys.iter().cloned().collect();
    }

    /// The values of `keys`: this instance's changes, else the cache, else
    /// one read of the rest.
    pub(crate) async fn get_many(&mut self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        let (source, range) = self.access.as_ref().map_err(|reason| StateError::Unavailable(reason.clone()))?;
        // A key in memory was checked when it first came: only new ones are hashed.
        let missing: Vec<String> = keys.iter().filter(|k| !self.knows(k)).cloned().collect();
        for key in &missing {
            self.check(key, range.as_ref())?;
        }
        source.served_from_memory(keys.len() - missing.len());
        if !missing.is_empty() {
            let read = source.read(&missing).await.map_err(StateError::Unavailable)?;
            for (key, value) in missing.into_iter().zip(read) {
                self.cache.put(key, value);
            }
        }
        Ok(keys.iter().map(|k| self.pending.get(k).cloned().unwrap_or_else(|| self.cache.get(k))).collect())
    }

    /// Sets (`Some`) or deletes (`None`) `key`'s value until the next checkpoint commits it.
    pub(crate) fn change(&mut self, key: String, value: Option<Vec<u8>>) -> Result<(), StateError> {
        let (_, range) = self.access.as_ref().map_err(|reason| StateError::Unavailable(reason.clone()))?;
        if !self.knows(&key) {
            self.check(&key, range.as_ref())?;
        }
        let size = value.as_ref().map_or(0, Vec::len);
        if size > MAX_VALUE_BYTES {
            return Err(StateError::TooLarge(format!("the value for `{key}` has {size} bytes; a value holds at most {MAX_VALUE_BYTES}")));
        }
        let replaced = self.pending.get(&key).map(|old| key.len() + old.as_ref().map_or(0, Vec::len));
        let bytes = self.pending_bytes - replaced.unwrap_or(0) + key.len() + size;
        if bytes > MAX_CHANGED_BYTES {
            return Err(StateError::TooLarge(format!(
                "the changes since the last checkpoint would hold {bytes} bytes, more than one checkpoint commits ({MAX_CHANGED_BYTES}): checkpoint before changing more"
            )));
        }
        self.pending_bytes = bytes;
        self.pending.insert(key, value);
        Ok(())
    }

    /// Whether `key` is in memory (changed or cached), so already checked.
    fn knows(&self, key: &str) -> bool {
        self.pending.contains_key(key) || self.cache.has(key)
    }

    /// Refuses a key that is empty, too long, the host's, or does not
    /// belong to the shard: by its MD5 hash, or because records of that key
    /// are in the batch being delivered (put with an explicit hash key).
    fn check(&self, key: &str, range: Option<&HashRange>) -> Result<(), StateError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(StateError::TooLarge(format!("a key has 1 to {MAX_KEY_BYTES} bytes; this one has {}", key.len())));
        }
        if key.starts_with(HOST_KEY_PREFIX) {
            return Err(StateError::NotThisShard(format!("the key `{key}` starts with `{HOST_KEY_PREFIX}`, which is kept for the host's own keys; use another key")));
        }
        if self.call_keys_only && !self.in_batch(key) && !self.admitted.contains(key) {
            return Err(StateError::NotThisShard(format!(
                "with --parallelism over 1 an instance keeps the state of the partition keys of the records it is given, \
                 which no other instance has at the same time; `{key}` is not one of this call's"
            )));
        }
        match range {
            Some(range) if !range.contains(key, None) && !self.admitted.contains(key) && !self.in_batch(key) => Err(StateError::NotThisShard(format!(
                "the key `{key}` hashes to {}, outside this shard's hash-key range {}..={}: \
                 a key's state lives with the shard its records go to (use the record's partition key)",
                hash_key(key, None),
                range.start,
                range.end
            ))),
            _ => Ok(()),
        }
    }

    /// The changes the next checkpoint commits.
    pub(crate) fn pending(&self) -> &StateChanges {
        &self.pending
    }

    /// The pending changes were committed: they are what is read from now on.
    pub(crate) fn committed(&mut self) {
        for (key, value) in std::mem::take(&mut self.pending) {
            self.cache.put(key, value);
        }
        self.pending_bytes = 0;
    }

    /// Hands the changes since the last checkpoint to the caller, which
    /// answers for them from now on, and forgets every cached value: the
    /// next call's keys may have changed in another instance meanwhile.
    pub(crate) fn take_changes(&mut self) -> StateChanges {
        self.cache = Cache::default();
        self.pending_bytes = 0;
        std::mem::take(&mut self.pending)
    }

    /// Drops the changes since the last checkpoint (the call that made them failed).
    pub(crate) fn discard(&mut self) {
        self.pending.clear();
        self.pending_bytes = 0;
    }
}

/// Committed values, the least recently used dropped past [`CACHE_BYTES`].
/// A key known to have no value is cached too (as `None`).
#[derive(Default)]
pub(crate) struct Cache {
    values: HashMap<String, (Option<Vec<u8>>, u64)>,
    /// Use tick → key, oldest first.
    order: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
}

impl Cache {
    pub(crate) fn has(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    pub(crate) fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.tick += 1;
        let (value, used) = self.values.get_mut(key)?;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, key.to_owned());
        value.clone()
    }

    pub(crate) fn put(&mut self, key: String, value: Option<Vec<u8>>) {
        self.tick += 1;
        self.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        self.order.insert(self.tick, key.clone());
        if let Some((old, used)) = self.values.insert(key.clone(), (value, self.tick)) {
            self.order.remove(&used);
            self.bytes -= key.len() + old.as_ref().map_or(0, Vec::len);
        }
        while self.bytes > CACHE_BYTES {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            if let Some((old, _)) = self.values.remove(&oldest) {
                self.bytes -= oldest.len() + old.as_ref().map_or(0, Vec::len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Committed values in a map, counting reads.
    #[derive(Default)]
    struct Map {
        values: Mutex<BTreeMap<String, Vec<u8>>>,
        reads: Mutex<usize>,
    }

    impl StateSource for Map {
        fn read<'a>(&'a self, keys: &'a [String]) -> StateFuture<'a, Result<Vec<Option<Vec<u8>>>, String>> {
            *self.reads.lock().unwrap() += 1;
            let values = self.values.lock().unwrap();
            let read = keys.iter().map(|k| values.get(k).cloned()).collect();
            Box::pin(std::future::ready(Ok(read)))
        }
    }

    fn keys(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[tokio::test]
    async fn reads_see_own_changes_and_a_cached_key_costs_no_read() {
        let source = Arc::new(Map::default());
        source.values.lock().unwrap().insert("a".into(), b"1".to_vec());
        let mut state = KeyedState::new(source.clone(), None);
        assert_eq!(state.get_many(&keys(&["a", "b"])).await.unwrap(), vec![Some(b"1".to_vec()), None]);
        state.change("b".into(), Some(b"2".to_vec())).unwrap();
        state.change("a".into(), None).unwrap();
        assert_eq!(state.get_many(&keys(&["a", "b"])).await.unwrap(), vec![None, Some(b"2".to_vec())]);
        assert_eq!(*source.reads.lock().unwrap(), 1, "the second get was answered from memory");
        assert_eq!(state.pending().len(), 2);
        state.committed();
        assert!(state.pending().is_empty());
        assert_eq!(state.get_many(&keys(&["b"])).await.unwrap(), vec![Some(b"2".to_vec())]);
        assert_eq!(*source.reads.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn discarded_changes_are_gone_and_the_committed_value_reads_again() {
        let source = Arc::new(Map::default());
        source.values.lock().unwrap().insert("a".into(), b"1".to_vec());
        let mut state = KeyedState::new(source, None);
        state.change("a".into(), Some(b"9".to_vec())).unwrap();
        state.discard();
        assert_eq!(state.get_many(&keys(&["a"])).await.unwrap(), vec![Some(b"1".to_vec())]);
    }

    #[tokio::test]
    async fn a_key_outside_the_shard_is_refused_naming_the_range() {
        let lower_half = HashRange { start: 0, end: u128::MAX / 2 };
        let mut state = KeyedState::new(Arc::new(Map::default()), Some(lower_half));
        let key_where = |lower: bool| (0..).map(|i| format!("user-{i}")).find(|k| (hash_key(k, None) <= u128::MAX / 2) == lower).unwrap();
        let (inside, outside) = (key_where(true), key_where(false));
        state.change(inside, Some(vec![1])).unwrap();
        let refused = state.change(outside.clone(), Some(vec![1])).unwrap_err();
        assert!(matches!(&refused, StateError::NotThisShard(m) if m.contains(&outside) && m.contains("..=")), "{refused:?}");
        assert!(matches!(state.get_many(std::slice::from_ref(&outside)).await, Err(StateError::NotThisShard(_))));
        // Its records came to this shard (put with an explicit hash key), so its state is this shard's.
        let placed: Batch = [crate::records::Record { data: b"", partition_key: &outside, sequence_number: "1", sub_sequence_number: None, arrival_timestamp_ms: 0, explicit_hash_key: None }].into_iter().collect();
        state.placing(&placed);
        state.change(outside.clone(), Some(vec![2])).unwrap();
        state.placing(&Batch::default());
        state.admit(std::slice::from_ref(&outside));
        state.discard();
        assert!(state.get_many(&[outside]).await.is_ok(), "a closing window's keys are taken as they are");
        let host_key = KeyedState::new(Arc::new(Map::default()), None).change("~kcl/window/x/0".into(), None);
        assert!(matches!(host_key, Err(StateError::NotThisShard(m)) if m.contains("kept for the host")));
    }

    #[tokio::test]
    async fn limits_name_what_is_too_large() {
        let mut state = KeyedState::new(Arc::new(Map::default()), None);
        assert!(matches!(state.change("big".into(), Some(vec![0; MAX_VALUE_BYTES + 1])), Err(StateError::TooLarge(m)) if m.contains("at most")));
        assert!(matches!(state.change(String::new(), None), Err(StateError::TooLarge(_))));
        let value = vec![0; MAX_VALUE_BYTES];
        let fits = MAX_CHANGED_BYTES / (MAX_VALUE_BYTES + 2);
        for i in 0..fits {
            state.change(format!("k{i}"), Some(value.clone())).unwrap();
        }
        state.change("k0".into(), Some(value.clone())).unwrap(); // a key changed again costs nothing more
        assert!(matches!(state.change("one-more".into(), Some(value)), Err(StateError::TooLarge(m)) if m.contains("checkpoint before")));
        let unavailable = KeyedState::unavailable("no state here").change("k".into(), None);
        assert!(matches!(unavailable, Err(StateError::Unavailable(m)) if m == "no state here"));
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_past_its_budget() {
        let mut cache = Cache::default();
        let big = vec![0; CACHE_BYTES / 4];
        cache.put("a".into(), Some(big.clone()));
        cache.put("b".into(), Some(big.clone()));
        cache.get("a");
        cache.put("c".into(), Some(big.clone()));
        cache.put("d".into(), Some(big));
        assert!(cache.has("a") && !cache.has("b"), "b was used least recently");
        assert!(cache.bytes <= CACHE_BYTES);
    }
}
