//! Tumbling windows in a shard's loop (`--window`): batches cut where their
//! records cross into a later window, and each window closed once every
//! record of it was delivered — when a record of a later window comes, when
//! a read at the shard's tip finds the window over, or at the shard's end.
//!
//! A close checkpoints every record delivered, calls the processor's
//! `window.close` with the keys the window's records changed, then commits
//! what the close changed (and the end of the window's index) at that
//! checkpoint. A failure anywhere there restarts the attempt: the next
//! instance finds the window still open, with the same keys.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use super::{Interrupt, Outcome, ShardLoop};
use crate::lease::LeaseStore;
use crate::records::Batch;
use crate::runtime::{CallError, CheckpointError, ShardInstance, WindowBounds};
use crate::state::WindowIndex;

/// How long after a window's end a read at the shard's tip closes it:
/// arrival timestamps are Kinesis' clock, "now" is this host's.
const CLOCK_ALLOWANCE_MS: u64 = 1_000;

/// A shard loop's windows: none without `--window`.
pub struct Windows {
    index: Option<Arc<StdMutex<WindowIndex>>>,
}

impl Windows {
    /// `shard`'s windows, `length` long (none: the loop runs without windows).
    pub fn new(length: Option<Duration>, shard: &str) -> Self {
        Self { index: length.map(|length| Arc::new(StdMutex::new(WindowIndex::new(shard, length.as_millis() as u64)))) }
    }

    /// The index the lease's checkpoints commit beside the state.
    pub(super) fn index(&self) -> Option<Arc<StdMutex<WindowIndex>>> {
        self.index.clone()
    }

    pub(super) fn with_index<T>(&self, f: impl FnOnce(&mut WindowIndex) -> T) -> Option<T> {
        self.index.as_ref().map(|index| f(&mut index.lock().expect("not poisoned")))
    }

    /// The open window, when records of the window starting at `start_ms`
    /// come and it is an earlier one: it closes before they are delivered.
    pub(super) fn closing_before(&self, start_ms: Option<u64>) -> Option<WindowBounds> {
        let start_ms = start_ms?;
        self.with_index(|index| index.open_window()).flatten().filter(|open| open.start_ms < start_ms)
    }

    /// The open window if it is over: at the shard's end (`shard_ended`),
    /// whatever its bounds; else when a read that found the shard's tip was
    /// sent (`read_at_ms`) after its end — not now: a batch read ahead and
    /// delivered late says nothing of the records that arrived since.
    pub(super) fn over(&self, shard_ended: bool, read_at_ms: u64) -> Option<WindowBounds> {
        match self.with_index(|index| index.open_window()).flatten()? {
            open if shard_ended => Some(WindowBounds { shard_ended, ..open }),
            open if read_at_ms >= open.end_ms + CLOCK_ALLOWANCE_MS => Some(open),
            _ => None,
        }
    }

    /// `batch` in pieces of one window each, in order, with the start of
    /// each piece's window (none without windows). A record that arrived
    /// before the open window started (a clock's skew), or in a window
    /// already closed, counts in the earliest window still open to it.
    pub(super) fn pieces(&self, batch: Batch) -> Vec<(Option<u64>, Batch)> {
        let Some(windows) = self.with_index(|index| {
            let mut current = index.earliest_start();
            batch
                .arrival_timestamps_ms
                .iter()
                .map(|arrival| {
                    let window = index.window_of(*arrival).max(current.unwrap_or(0));
                    current = Some(window);
                    window
                })
                .collect::<Vec<u64>>()
        }) else {
            return vec![(None, batch)];
        };
        let mut cuts: Vec<usize> = (1..windows.len()).filter(|&i| windows[i] != windows[i - 1]).collect();
        if cuts.is_empty() {
            return vec![(windows.first().copied(), batch)];
        }
        cuts.insert(0, 0);
        cuts.push(windows.len());
        cuts.windows(2).map(|cut| (Some(windows[cut[0]]), batch.slice(cut[0], cut[1] - cut[0]))).collect()
    }
}

impl<S: LeaseStore> ShardLoop<S> {
    /// Loads the shard's open window from the state table (with `--window`).
    pub(super) async fn load_windows(&self) -> Result<(), Interrupt> {
        let Some(index) = &self.windows.index else { return Ok(()) };
        let (shard, length_ms) = {
            let index = index.lock().expect("not poisoned");
            (index.shard().to_owned(), index.length_ms())
        };
        let loaded = WindowIndex::load(&self.state, &self.stream, &shard, length_ms).await.map_err(Interrupt::Failed)?;
        *index.lock().expect("not poisoned") = loaded;
        Ok(())
    }

    /// Before delivering records of the window starting at `start_ms`:
    /// closes the open window when it is an earlier one, and opens this one.
    pub(super) async fn enter_window(&self, instance: &mut ShardInstance, start_ms: Option<u64>) -> Result<(), Interrupt> {
        if let Some(open) = self.windows.closing_before(start_ms) {
            self.close_window(instance, open).await?;
        }
        self.open_window(start_ms);
        Ok(())
    }

    /// Opens the window starting at `start_ms`, unless it is open already.
    pub(super) fn open_window(&self, start_ms: Option<u64>) {
        let Some(start_ms) = start_ms else { return };
        self.windows.with_index(|index| index.open_at(start_ms));
        self.metrics.window_opened(start_ms);
    }

    /// At the shard's tip (or its end, `shard_ended`): closes the open
    /// window if it is over (see [`Windows::over`]).
    pub(super) async fn close_if_over(&self, instance: &mut ShardInstance, shard_ended: bool, read_at_ms: u64) -> Result<(), Interrupt> {
        match self.windows.over(shard_ended, read_at_ms) {
            Some(open) => self.close_window(instance, open).await,
            None => Ok(()),
        }
    }

    /// Checkpoints every record delivered, then closes `window` and commits the close.
    async fn close_window(&self, instance: &mut ShardInstance, window: WindowBounds) -> Result<(), Interrupt> {
        if let Err(e) = instance.checkpoint().await {
            if matches!(e, CheckpointError::LeaseLost) {
                return Err(self.finish_outcome(instance, Outcome::LeaseLost).await);
            }
            return Err(Interrupt::Failed(format!("checkpointing the records of window {} before closing it failed: {e:?}", bounds(&window))));
        }
        let keys = self.windows.with_index(WindowIndex::begin_close).unwrap_or_default();
        let closed = instance.close_window(window, &keys).await;
        match self.window_closed(instance.processor(), &window, keys.len(), closed) {
            Err(Interrupt::Done(Outcome::LeaseLost)) => Err(self.finish_outcome(instance, Outcome::LeaseLost).await),
            closed => closed,
        }
    }

    /// How the close of `window` with `keys` keys went, `closed` (its call
    /// and its commit): counted and logged, or the window left open for
    /// the next attempt to close again.
    pub(super) fn window_closed(&self, processor: &str, window: &WindowBounds, keys: usize, closed: Result<(), CallError>) -> Result<(), Interrupt> {
        match closed {
            Ok(()) => {
                self.metrics.window_closed();
                tracing::info!(shard = %self.held.key(), processor, "closed window {} with {keys} keys", bounds(window));
                Ok(())
            }
            Err(e) => {
                self.windows.with_index(WindowIndex::abort_close);
                if matches!(&e, CallError::Uncommitted(CheckpointError::LeaseLost)) {
                    return Err(Interrupt::Done(Outcome::LeaseLost));
                }
                self.metrics.guest_error(&e);
                Err(Interrupt::Failed(format!("closing window {} failed: {e}", bounds(window))))
            }
        }
    }
}

/// A window as `[start, end)` in milliseconds, for messages.
pub(super) fn bounds(window: &WindowBounds) -> String {
    format!("[{}, {})", window.start_ms, window.end_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Record;
    use crate::runtime::StateChanges;

    fn arriving(arrivals: &[u64]) -> Batch {
        let seqs: Vec<String> = (1..=arrivals.len()).map(|i| i.to_string()).collect();
        arrivals
            .iter()
            .zip(&seqs)
            .map(|(arrival, seq)| Record { data: b"", partition_key: "k", sequence_number: seq, sub_sequence_number: None, arrival_timestamp_ms: *arrival, explicit_hash_key: None })
            .collect()
    }

    fn cut(windows: &Windows, arrivals: &[u64]) -> Vec<(Option<u64>, Vec<u64>)> {
        windows.pieces(arriving(arrivals)).into_iter().map(|(start, batch)| (start, batch.arrival_timestamps_ms.clone())).collect()
    }

    #[test]
    fn a_batch_is_cut_where_its_records_cross_into_a_later_window() {
        assert_eq!(cut(&Windows::new(None, "s"), &[1, 70_000]), vec![(None, vec![1, 70_000])], "no windows: one piece");
        let windows = Windows::new(Some(Duration::from_secs(60)), "s");
        assert_eq!(cut(&windows, &[59_000, 59_999]), vec![(Some(0), vec![59_000, 59_999])]);
        assert_eq!(cut(&windows, &[59_000, 60_000, 61_000, 185_000]), vec![(Some(0), vec![59_000]), (Some(60_000), vec![60_000, 61_000]), (Some(180_000), vec![185_000])]);
        // With the window of minute 2 open, a record stamped a little earlier (a clock's skew) counts in it.
        windows.with_index(|index| index.open_at(120_000));
        assert_eq!(cut(&windows, &[119_500, 121_000, 181_000]), vec![(Some(120_000), vec![119_500, 121_000]), (Some(180_000), vec![181_000])]);
        assert!(cut(&windows, &[]).iter().all(|(start, batch)| start.is_none() && batch.is_empty()), "an empty batch (a read at the tip) is one empty piece");
        // Once that window closed, a record stamped in it (late past the allowance) counts in the next: it never reopens it.
        windows.with_index(|index| {
            index.begin_close();
            index.commit_items(&StateChanges::new());
            index.committed();
        });
        assert_eq!(cut(&windows, &[150_000, 185_000]), vec![(Some(180_000), vec![150_000, 185_000])]);
    }
}
