//! Tumbling windows in a replay (`--window 60s`), as `kcl-host run` has
//! them: windows of the records' arrival times aligned to the Unix epoch, no
//! batch spanning two, and each window closed — everything delivered
//! checkpointed, then `close` with the keys the window's checkpoints changed
//! — when a record of a later window comes, the last one at the input's end
//! (as at a shard's end).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::records::Batch;
use crate::runtime::{CallError, ShardInstance, WindowBounds};

/// The windows of one replay.
pub(super) struct ReplayWindows {
    length_ms: u64,
    /// The start of the open window.
    open: Option<u64>,
    /// Keys the open window's checkpoints changed (filled by the checkpoint sink).
    keys: Arc<Mutex<BTreeSet<String>>>,
}

impl ReplayWindows {
    /// Windows `length` long.
    pub(super) fn new(length: Duration) -> Self {
        Self { length_ms: (length.as_millis() as u64).max(1), open: None, keys: Arc::default() }
    }

    /// Where the checkpoint sink notes the keys each checkpoint changed.
    pub(super) fn keys(&self) -> Arc<Mutex<BTreeSet<String>>> {
        self.keys.clone()
    }

    fn start_of(&self, arrival_ms: u64) -> u64 {
        arrival_ms - arrival_ms % self.length_ms
    }

    /// How many of the `limit` records of `records` from `next` on are in
    /// the window of the first of them: the next batch's length.
    pub(super) fn batch_len(&self, records: &Batch, next: usize, limit: usize) -> usize {
        let arrivals = &records.arrival_timestamps_ms[next..(next + limit).min(records.len())];
        let Some(first) = arrivals.first() else { return 0 };
        let window = self.start_of(*first).max(self.open.unwrap_or(0));
        arrivals.iter().take_while(|arrival| self.start_of(**arrival).max(window) == window).count()
    }

    /// Before delivering the record that arrived at `arrival_ms`: closes the
    /// open window when the record is of a later one, and opens its window.
    pub(super) async fn enter(&mut self, instance: &mut ShardInstance, arrival_ms: u64) -> Result<(), (String, CallError)> {
        // A record that arrived before the open window started (a producer's clock) counts in it.
        let start = self.start_of(arrival_ms).max(self.open.unwrap_or(0));
        if self.open.is_some_and(|open| open < start) {
            self.close(instance, false).await?;
        }
        self.open = Some(start);
        Ok(())
    }

    /// Closes the open window, if any; `at_end` when the input ended.
    pub(super) async fn close(&mut self, instance: &mut ShardInstance, at_end: bool) -> Result<(), (String, CallError)> {
        let Some(start_ms) = self.open.take() else { return Ok(()) };
        let window = WindowBounds { start_ms, end_ms: start_ms + self.length_ms, shard_ended: at_end };
        let call = format!("close-window [{}, {})", window.start_ms, window.end_ms);
        instance.checkpoint().await.map_err(|e| (call.clone(), CallError::Uncommitted(e)))?;
        let keys: Vec<String> = std::mem::take(&mut *self.keys.lock().expect("not poisoned")).into_iter().collect();
        println!("window [{}, {}) closes with {} keys", window.start_ms, window.end_ms, keys.len());
        instance.close_window(window, &keys).await.map_err(|e| (call, e))?;
        // What the close itself changed is not the next window's.
        self.keys.lock().expect("not poisoned").clear();
        Ok(())
    }
}
