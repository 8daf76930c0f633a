//! How far a shard processed by several instances is done: the records
//! below which every one is done, whichever instance had it.
//!
//! Each record read gets an ordinal (its place in the shard since the
//! attempt began); instances report the ordinals they finished, in any
//! order. Every ordinal below [`Progress::done_below`] is done; the host
//! checkpoints at most there (lower when a finished call's state changes
//! reach past it: `super::state`), and the positions of the records are
//! kept until a checkpoint passes them.

use std::collections::VecDeque;

use crate::records::{Batch, Positions, Position};

/// Which of the records read so far are done.
#[derive(Default)]
pub(super) struct Progress {
    /// Batches read that no checkpoint has passed yet, oldest first.
    pending: VecDeque<Read>,
    /// The ordinal the next record read gets.
    next: u64,
    /// Every record with an ordinal below this one is done.
    done_below: u64,
}

/// One batch as read, and which of its records are done.
struct Read {
    first: u64,
    positions: Positions,
    done: Vec<bool>,
}

impl Read {
    fn end(&self) -> u64 {
        self.first + self.done.len() as u64
    }
}

impl Progress {
    /// Notes a batch read from the shard; its records get the ordinals
    /// from the one returned on.
    pub(super) fn read(&mut self, batch: &Batch) -> u64 {
        let first = self.next;
        if !batch.is_empty() {
            self.pending.push_back(Read { first, positions: batch.positions(), done: vec![false; batch.len()] });
            self.next += batch.len() as u64;
        }
        first
    }

    /// The record of `ordinal`, if it is still kept: its batch, and its index there.
    fn find(&self, ordinal: u64) -> Option<(usize, usize)> {
        // Batches are in ordinal order: the last one starting at or before it holds it.
        let at = self.pending.partition_point(|read| read.first <= ordinal).checked_sub(1)?;
        let read = &self.pending[at];
        (ordinal < read.end()).then(|| (at, (ordinal - read.first) as usize))
    }

    /// Notes records done (processed, or given up on by the failure policy).
    pub(super) fn done(&mut self, ordinals: &[u64]) {
        for &ordinal in ordinals {
            if let Some((at, index)) = self.find(ordinal) {
                self.pending[at].done[index] = true;
            }
        }
        while let Some((at, index)) = self.find(self.done_below)
            && self.pending[at].done[index]
        {
            self.done_below += 1;
        }
    }

    /// Every record with an ordinal below this is done.
    pub(super) fn done_below(&self) -> u64 {
        self.done_below
    }

    /// The position of the record just below ordinal `end`: the checkpoint
    /// that covers every record below `end` (none for 0, or when a
    /// checkpoint passed it already).
    pub(super) fn position_below(&self, end: u64) -> Option<Position> {
        let (at, index) = self.find(end.checked_sub(1)?)?;
        self.pending[at].positions.get(index)
    }

    /// A checkpoint covers every record below `end`: their positions are
    /// not needed again.
    pub(super) fn checkpointed_below(&mut self, end: u64) {
        while self.pending.front().is_some_and(|read| read.end() <= end) {
            self.pending.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Record;

    fn batch(first_sequence_number: u64, n: u64) -> Batch {
        let sequence_numbers: Vec<String> = (first_sequence_number..first_sequence_number + n).map(|s| s.to_string()).collect();
        sequence_numbers
            .iter()
            .map(|s| Record { data: b"", partition_key: "k", sequence_number: s, sub_sequence_number: None, arrival_timestamp_ms: 0, explicit_hash_key: None })
            .collect()
    }

    fn at(progress: &Progress) -> Option<String> {
        progress.position_below(progress.done_below()).map(|p| p.sequence_number().to_owned())
    }

    #[test]
    fn the_checkpoint_waits_for_the_slowest_record_below_it() {
        let mut progress = Progress::default();
        assert_eq!(progress.read(&batch(100, 4)), 0);
        assert_eq!(progress.read(&batch(200, 3)), 4);
        progress.done(&[1, 3, 4, 5]);
        assert_eq!(at(&progress), None, "record 0 is not done, so nothing is");
        progress.done(&[0]);
        assert_eq!(at(&progress).as_deref(), Some("101"), "2 is not done");
        progress.done(&[2]);
        assert_eq!(at(&progress).as_deref(), Some("201"), "across the batch boundary, up to 6 which is not done");
        progress.done(&[6]);
        assert_eq!(at(&progress).as_deref(), Some("202"));
    }

    #[test]
    fn ordinals_go_on_across_batches_and_empty_reads() {
        let mut progress = Progress::default();
        progress.read(&batch(1, 2));
        assert_eq!(progress.read(&Batch::default()), 2, "an empty read takes no ordinals");
        assert_eq!(progress.read(&batch(3, 1)), 2);
        progress.done(&[2, 0, 1, 99]);
        assert_eq!(at(&progress).as_deref(), Some("3"), "an unknown ordinal is ignored");
    }

    #[test]
    fn positions_are_kept_until_a_checkpoint_passes_them() {
        let mut progress = Progress::default();
        progress.read(&batch(100, 3));
        progress.read(&batch(200, 2));
        progress.done(&[0, 1, 2, 3, 4]);
        assert_eq!(progress.done_below(), 5);
        assert_eq!(progress.position_below(2).unwrap().sequence_number(), "101", "a lower checkpoint can still be named");
        progress.checkpointed_below(2);
        assert_eq!(progress.position_below(4).unwrap().sequence_number(), "200", "the first batch is kept: its last record is not passed");
        progress.checkpointed_below(3);
        assert_eq!(progress.position_below(3), None, "passed, so dropped");
        assert_eq!(progress.position_below(5).unwrap().sequence_number(), "201");
        assert_eq!(progress.position_below(0), None);
    }
}
