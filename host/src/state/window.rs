//! A shard's open tumbling window (`--window`), kept in the state table so
//! that a close after any crash sees the same keys.
//!
//! The window's start and the keys changed while processing its records are
//! host items of the shard's state — `~kcl/window/<shard>/<n>`, each a JSON
//! `{"start_ms": …, "keys": […]}` — written by the same commits as the
//! state changes they index: a checkpoint that changes keys not yet listed
//! adds an item `n` listing them (the first checkpoint in a window adds item
//! 0 even when it changes none, to record the window), and the commit of the
//! window's close deletes them all. So the index is always exactly the keys
//! changed by the records up to the last checkpoint.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::table::StateTable;
use crate::runtime::{StateChanges, WindowBounds, HOST_KEY_PREFIX, MAX_VALUE_BYTES};

/// Most bytes of keys one index item lists (an item holds 400 KB).
const ITEM_KEY_BYTES: usize = MAX_VALUE_BYTES - 10_000;

/// One index item's value.
#[derive(Serialize, Deserialize)]
struct IndexItem {
    start_ms: u64,
    keys: Vec<String>,
}

/// The window being filled, as of the last commit.
#[derive(Debug, Clone, PartialEq)]
struct Open {
    start_ms: u64,
    keys: BTreeSet<String>,
    /// Index items written for it.
    items: u32,
}

/// What the commit being written adds to the index.
#[derive(Debug)]
enum Staged {
    Keys { start_ms: u64, keys: Vec<String>, items: u32 },
    Close,
}

/// A shard's window index: which window is open and the keys its records
/// changed, committed and about to be.
#[derive(Debug)]
pub struct WindowIndex {
    shard: String,
    length_ms: u64,
    open: Option<Open>,
    /// Where the last window this process closed ended: a record that
    /// arrived before it (late by more than the clock's allowance) counts
    /// in a later window, never in one already closed.
    closed_end_ms: Option<u64>,
    /// Set by [`Self::begin_close`]: the next commit ends the window.
    closing: bool,
    staged: Option<Staged>,
}

impl WindowIndex {
    /// No window open yet, for `shard` with windows `length_ms` long.
    pub fn new(shard: &str, length_ms: u64) -> Self {
        Self { shard: shard.to_owned(), length_ms, open: None, closed_end_ms: None, closing: false, staged: None }
    }

    /// The shard whose windows these are.
    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// How long each window is.
    pub fn length_ms(&self) -> u64 {
        self.length_ms
    }

    /// The window open as of the shard's last commit, read from `table`.
    pub async fn load(table: &StateTable, stream: &str, shard: &str, length_ms: u64) -> Result<Self, String> {
        let mut index = Self::new(shard, length_ms);
        loop {
            let n = index.open.as_ref().map_or(0, |open| open.items);
            let key = index.item_key(n);
            let read = table.read(stream, std::slice::from_ref(&key)).await.map_err(|e| format!("reading the window index item `{key}` failed: {e}"))?;
            let Some(value) = read.into_iter().next().flatten() else { return Ok(index) };
            let item: IndexItem = serde_json::from_slice(&value).map_err(|e| format!("the window index item `{key}` is not what kcl-host writes: {e}"))?;
            let open = index.open.get_or_insert_with(|| Open { start_ms: item.start_ms, keys: BTreeSet::new(), items: 0 });
            open.keys.extend(item.keys);
            open.items += 1;
        }
    }

    fn item_key(&self, n: u32) -> String {
        format!("{HOST_KEY_PREFIX}window/{}/{n}", self.shard)
    }

    /// The start of the window that holds `arrival_ms`.
    pub fn window_of(&self, arrival_ms: u64) -> u64 {
        arrival_ms - arrival_ms % self.length_ms
    }

    /// The open window's bounds.
    pub fn open_window(&self) -> Option<WindowBounds> {
        self.open.as_ref().map(|open| WindowBounds { start_ms: open.start_ms, end_ms: open.start_ms + self.length_ms, shard_ended: false })
    }

    /// The earliest window a record may still count in: the open one, or
    /// the one after the last closed.
    pub fn earliest_start(&self) -> Option<u64> {
        self.open.as_ref().map(|open| open.start_ms).or(self.closed_end_ms)
    }

    /// Opens the window starting at `start_ms`, when none is.
    pub fn open_at(&mut self, start_ms: u64) {
        self.open.get_or_insert_with(|| Open { start_ms, keys: BTreeSet::new(), items: 0 });
    }

    /// The keys to close the open window with; its next commit ends it.
    pub fn begin_close(&mut self) -> Vec<String> {
        self.closing = true;
        self.open.as_ref().map(|open| open.keys.iter().cloned().collect()).unwrap_or_default()
    }

    /// The close failed: the window stays open.
    pub fn abort_close(&mut self) {
        self.closing = false;
    }

    /// The host items to commit beside `changes`: the keys `changes` adds
    /// to the open window, or, when closing, the deletes of every item.
    pub fn commit_items(&mut self, changes: &StateChanges) -> StateChanges {
        let Some(open) = &self.open else {
            self.staged = None;
            return StateChanges::new();
        };
        if self.closing {
            self.staged = Some(Staged::Close);
            return (0..open.items).map(|n| (self.item_key(n), None)).collect();
        }
        let new: Vec<String> = changes.keys().filter(|key| !open.keys.contains(*key)).cloned().collect();
        if new.is_empty() && open.items > 0 {
            self.staged = None;
            return StateChanges::new();
        }
        let (start_ms, first) = (open.start_ms, open.items);
        let mut items = StateChanges::new();
        let mut listed: Vec<&String> = Vec::new();
        let mut bytes = 0;
        let flush = |listed: &mut Vec<&String>, items: &mut StateChanges| {
            let value = IndexItem { start_ms, keys: listed.drain(..).cloned().collect() };
            items.insert(self.item_key(first + items.len() as u32), Some(serde_json::to_vec(&value).expect("an index item serializes")));
        };
        for key in &new {
            if bytes + key.len() > ITEM_KEY_BYTES && !listed.is_empty() {
                flush(&mut listed, &mut items);
                bytes = 0;
            }
            bytes += key.len() + 3;
            listed.push(key);
        }
        flush(&mut listed, &mut items);
        self.staged = Some(Staged::Keys { start_ms, items: items.len() as u32, keys: new });
        items
    }

    /// The last [`Self::commit_items`] was committed.
    pub fn committed(&mut self) {
        match self.staged.take() {
            Some(Staged::Close) => {
                self.closed_end_ms = self.open.take().map(|open| open.start_ms + self.length_ms);
                self.closing = false;
            }
            Some(Staged::Keys { start_ms, keys, items }) => {
                if let Some(open) = self.open.as_mut().filter(|open| open.start_ms == start_ms) {
                    open.keys.extend(keys);
                    open.items += items;
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(keys: &[&str]) -> StateChanges {
        keys.iter().map(|k| (k.to_string(), Some(b"1".to_vec()))).collect()
    }

    fn listed(items: &StateChanges) -> Vec<(String, u64, Vec<String>)> {
        items
            .iter()
            .map(|(key, value)| {
                let item: IndexItem = serde_json::from_slice(value.as_ref().unwrap()).unwrap();
                (key.clone(), item.start_ms, item.keys)
            })
            .collect()
    }

    #[test]
    fn each_commit_lists_the_keys_it_adds_and_the_close_deletes_every_item() {
        let mut index = WindowIndex::new("shardId-1", 60_000);
        assert!(index.commit_items(&changes(&["a"])).is_empty(), "no window open: nothing to index");
        index.open_at(index.window_of(125_000));
        let first = index.commit_items(&StateChanges::new());
        assert_eq!(listed(&first), vec![("~kcl/window/shardId-1/0".into(), 120_000, vec![])], "the first commit records the window");
        index.committed();
        let second = index.commit_items(&changes(&["a", "b"]));
        assert_eq!(listed(&second), vec![("~kcl/window/shardId-1/1".into(), 120_000, vec!["a".into(), "b".into()])]);
        // Not committed (the write failed): the next commit lists them again, at the same place.
        let third = index.commit_items(&changes(&["a", "b", "c"]));
        assert_eq!(third.keys().collect::<Vec<_>>(), vec!["~kcl/window/shardId-1/1"]);
        index.committed();
        assert!(index.commit_items(&changes(&["c"])).is_empty(), "c is listed already");
        index.committed();
        assert_eq!(index.begin_close(), vec!["a", "b", "c"]);
        let close = index.commit_items(&changes(&["a"]));
        assert_eq!(close, (0..2).map(|n| (format!("~kcl/window/shardId-1/{n}"), None)).collect());
        index.committed();
        assert!(index.open_window().is_none());
        assert_eq!(index.earliest_start(), Some(180_000), "a late record counts in a later window, not the closed one");
    }

    #[test]
    fn an_aborted_close_keeps_the_window_and_many_keys_take_several_items() {
        let mut index = WindowIndex::new("s", 1_000);
        index.open_at(5_000);
        let keys: Vec<String> = (0..1_000).map(|i| format!("{i:0>600}")).collect();
        let many: StateChanges = keys.iter().map(|k| (k.clone(), None)).collect();
        let items = index.commit_items(&many);
        assert!(items.len() > 1 && items.values().all(|v| v.as_ref().unwrap().len() <= MAX_VALUE_BYTES), "{} items", items.len());
        assert_eq!(listed(&items).into_iter().flat_map(|(_, _, keys)| keys).collect::<Vec<_>>(), keys);
        index.committed();
        index.begin_close();
        index.abort_close();
        assert!(index.commit_items(&changes(&["new"])).keys().all(|k| k.ends_with(&format!("/{}", items.len()))));
        assert_eq!(index.open_window().map(|w| (w.start_ms, w.end_ms)), Some((5_000, 6_000)));
    }
}
