//! Tumbling windows with several instances per shard (`--window` with
//! `--parallelism`). What is read waits here until it can be routed:
//! records of the open window go to the lanes at once; records of a later
//! window, and a read at the tip after the open window's end, wait until
//! every call returned and nothing is queued. Then the host checkpoints
//! every record of the window with the changes of its calls, one instance
//! closes the window with every key its records changed (whichever
//! instance changed them), and what the close changed is committed at that
//! same checkpoint. A failure there restarts the attempt, which finds the
//! window still open with the same keys, as with one instance.

use std::collections::{BTreeSet, VecDeque};

use super::super::hooks::checkpoint_error;
use super::super::window::bounds;
use super::super::{Interrupt, ShardLoop};
use super::lanes::Lanes;
use super::{Done, Lane};
use crate::lease::{Checkpoint, LeaseStore};
use crate::records::Batch;
use crate::runtime::{CallError, WindowBounds};
use crate::state::WindowIndex;

/// What was read, waiting to be routed to the lanes.
pub(super) enum Held {
    /// Records of one window (none without `--window`), and the first one's ordinal.
    Records { window: Option<u64>, batch: Box<Batch>, first: u64 },
    /// A read at the shard's tip, sent at this time: the open window may be over.
    Tip { read_at_ms: u64 },
}

impl<S: LeaseStore> ShardLoop<S> {
    /// `batch` as read (its first record's ordinal `first`) in pieces of one
    /// window each, then, at the tip with `--window`, a mark of when the
    /// read was sent.
    pub(super) fn hold(&self, held: &mut VecDeque<Held>, batch: Batch, first: u64, read_at_ms: u64) {
        let at_tip = batch.millis_behind_latest == 0;
        let mut first = first;
        for (window, batch) in self.windows.pieces(batch) {
            let records = batch.len() as u64;
            if records > 0 {
                held.push_back(Held::Records { window, batch: Box::new(batch), first });
            }
            first += records;
        }
        if at_tip && self.windows.index().is_some() {
            held.push_back(Held::Tip { read_at_ms });
        }
    }

    /// Routes what is held while it belongs to the open window. What needs
    /// the open window closed first waits until the lanes are drained (no
    /// call running, nothing queued): then `closer`, an idle lane, closes it.
    pub(super) async fn route_held(&self, held: &mut VecDeque<Held>, lanes: &mut Lanes, mut closer: Option<&mut Lane>, done: &mut Done) -> Result<(), Interrupt> {
        while let Some(next) = held.front() {
            let closing = match next {
                Held::Records { window, .. } => self.windows.closing_before(*window),
                Held::Tip { read_at_ms } => self.windows.over(false, *read_at_ms),
            };
            if let Some(window) = closing {
                let Some(lane) = closer.as_deref_mut() else { return Ok(()) };
                self.close_lanes_window(lane, window, done).await?;
            }
            if let Some(Held::Records { window, batch, first }) = held.pop_front() {
                self.open_window(window);
                lanes.route(&batch, first);
                closer = None;
            }
        }
        Ok(())
    }

    /// With the lanes drained: checkpoints every record (and the changes of
    /// their calls), closes `window` on `lane`'s instance and commits what
    /// it changed at that checkpoint.
    pub(super) async fn close_lanes_window(&self, lane: &mut Lane, window: WindowBounds, done: &mut Done) -> Result<(), Interrupt> {
        self.write_progress(done).await?;
        let checkpoint = match &done.written {
            Some(position) if done.written_below == done.progress.done_below() => position.clone(),
            _ => return Err(Interrupt::Failed(format!("the records of window {} could not be checkpointed before it closed", bounds(&window)))),
        };
        let keys = self.windows.with_index(WindowIndex::begin_close).unwrap_or_default();
        let closed = match lane.instance.call_close_window(window, &keys).await {
            Ok(()) => {
                let mut changes = std::mem::take(&mut *lane.notes.changes.lock().expect("not poisoned"));
                changes.extend(lane.instance.take_state_changes());
                let committed = self.committer().write(Checkpoint::At(checkpoint), &BTreeSet::new(), &changes).await;
                committed.map(|()| done.states.committed(changes)).map_err(|e| CallError::Uncommitted(checkpoint_error(e)))
            }
            Err(e) => Err(e),
        };
        self.window_closed(lane.instance.processor(), &window, keys.len(), closed)
    }
}
