//! The shard's checkpoint when several instances process it: the last
//! position below which every record is done, whichever instance had it.
//!
//! Each record read gets an ordinal (its place in the shard since the
//! attempt began); instances report the ordinals they finished, in any
//! order, and the checkpoint is the position of the end of the longest run
//! of finished ordinals from the start.

use std::collections::VecDeque;

use crate::records::{Batch, Positions, Position};

/// Which of the records read so far are done.
#[derive(Default)]
pub(super) struct Progress {
    /// Batches read and not wholly done, oldest first.
    pending: VecDeque<Read>,
    /// The ordinal the next record read gets.
    next: u64,
    /// Every record up to and including this one is done.
    done_through: Option<Position>,
}

/// One batch as read, and which of its records are done.
struct Read {
    first: u64,
    positions: Positions,
    done: Vec<bool>,
    /// How many records from the start are done.
    prefix: usize,
}

impl Progress {
    /// Notes a batch read from the shard; its records get the ordinals
    /// from the one returned on.
    pub(super) fn read(&mut self, batch: &Batch) -> u64 {
        let first = self.next;
        if !batch.is_empty() {
            self.pending.push_back(Read { first, positions: batch.positions(), done: vec![false; batch.len()], prefix: 0 });
            self.next += batch.len() as u64;
        }
        first
    }

    /// Notes records done (processed, or given up on by the failure policy).
    pub(super) fn done(&mut self, ordinals: &[u64]) {
        for &ordinal in ordinals {
            // Batches are in ordinal order: the last one starting at or before it holds it.
            let at = self.pending.partition_point(|read| read.first <= ordinal);
            if let Some(read) = at.checked_sub(1).and_then(|i| self.pending.get_mut(i))
                && let Some(done) = read.done.get_mut((ordinal - read.first) as usize)
            {
                *done = true;
            }
        }
        while let Some(front) = self.pending.front_mut() {
            while front.done.get(front.prefix) == Some(&true) {
                front.prefix += 1;
            }
            if front.prefix > 0 {
                self.done_through = front.positions.get(front.prefix - 1);
            }
            if front.prefix < front.done.len() {
                break;
            }
            self.pending.pop_front();
        }
    }

    /// The position every record up to which is done, if any is.
    pub(super) fn done_through(&self) -> Option<&Position> {
        self.done_through.as_ref()
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

    fn at(progress: &Progress) -> Option<&str> {
        progress.done_through().map(Position::sequence_number)
    }

    #[test]
    fn the_checkpoint_waits_for_the_slowest_record_below_it() {
        let mut progress = Progress::default();
        assert_eq!(progress.read(&batch(100, 4)), 0);
        assert_eq!(progress.read(&batch(200, 3)), 4);
        progress.done(&[1, 3, 4, 5]);
        assert_eq!(at(&progress), None, "record 0 is not done, so nothing is");
        progress.done(&[0]);
        assert_eq!(at(&progress), Some("101"), "2 is not done");
        progress.done(&[2]);
        assert_eq!(at(&progress), Some("201"), "across the batch boundary, up to 6 which is not done");
        progress.done(&[6]);
        assert_eq!(at(&progress), Some("202"));
    }

    #[test]
    fn ordinals_go_on_across_batches_and_empty_reads() {
        let mut progress = Progress::default();
        progress.read(&batch(1, 2));
        assert_eq!(progress.read(&Batch::default()), 2, "an empty read takes no ordinals");
        assert_eq!(progress.read(&batch(3, 1)), 2);
        progress.done(&[2, 0, 1, 99]);
        assert_eq!(at(&progress), Some("3"), "an unknown ordinal is ignored");
    }
}
