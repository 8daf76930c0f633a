//! What a shard keeps so a swap can hand the new instance the records
//! delivered since the last checkpoint without reading Kinesis again, and
//! the worker-wide budget all shards keep it in. A shard over the budget
//! keeps nothing until its next checkpoint; a swap in that window restarts
//! the shard from its checkpoint instead (slower, never a record lost).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::records::{Batch, Position};

/// The record data every shard of one worker may keep, together.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
}

impl Budget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { limit, used: AtomicUsize::new(0) })
    }

    /// Takes `bytes` from the budget, if they fit.
    fn reserve(&self, bytes: usize) -> bool {
        self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(bytes).filter(|&n| n <= self.limit)).is_ok()
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes kept by all shards now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// The batches one shard delivered since its last checkpoint.
#[derive(Debug)]
pub struct Unacknowledged {
    batches: VecDeque<Batch>,
    bytes: usize,
    budget: Arc<Budget>,
    /// Set when a batch did not fit the budget: the last record given up.
    /// Until a checkpoint reaches it, what is kept does not cover everything
    /// since the checkpoint.
    given_up_through: Option<Position>,
}

impl Unacknowledged {
    pub fn new(budget: Arc<Budget>) -> Self {
        Self { batches: VecDeque::new(), bytes: 0, budget, given_up_through: None }
    }

    /// Keeps `batch` (delivered ok), if the budget allows; drops what
    /// `checkpoint` covers.
    pub fn delivered(&mut self, batch: Batch, checkpoint: Option<&Position>) {
        self.prune(checkpoint);
        let bytes = batch.data.len();
        if self.given_up_through.is_none() && self.budget.reserve(bytes) {
            self.bytes += bytes;
            self.batches.push_back(batch);
            return;
        }
        self.given_up_through = batch.len().checked_sub(1).and_then(|last| batch.position(last)).or(self.given_up_through.take());
        self.clear();
    }

    /// The records after `checkpoint`, as batches; `None` when some of them
    /// were given up for the budget.
    pub fn since(&mut self, checkpoint: Option<&Position>) -> Option<Vec<Batch>> {
        self.prune(checkpoint);
        if self.given_up_through.is_some() {
            return None;
        }
        Some(
            self.batches
                .iter()
                .map(|b| checkpoint.map_or_else(|| b.clone(), |c| b.after(c)))
                .filter(|b| !b.is_empty())
                .collect(),
        )
    }

    fn prune(&mut self, checkpoint: Option<&Position>) {
        let Some(checkpoint) = checkpoint else { return };
        while let Some(front) = self.batches.front() {
            let covered = front.len().checked_sub(1).and_then(|last| front.position(last)).is_some_and(|last| last <= *checkpoint);
            if !covered {
                break;
            }
            let bytes = front.data.len();
            self.batches.pop_front();
            self.bytes -= bytes;
            self.budget.release(bytes);
        }
        if self.given_up_through.as_ref().is_some_and(|through| through <= checkpoint) {
            self.given_up_through = None;
        }
    }

    fn clear(&mut self) {
        self.batches.clear();
        self.budget.release(std::mem::take(&mut self.bytes));
    }
}

impl Drop for Unacknowledged {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seqs: &[&str]) -> Batch {
        seqs.iter()
            .map(|seq| crate::records::Record {
                data: b"xxxx",
                partition_key: "k",
                sequence_number: seq,
                sub_sequence_number: None,
                arrival_timestamp_ms: 0,
                explicit_hash_key: None,
            })
            .collect()
    }

    fn at(seq: &str) -> Position {
        Position::new(seq, 0).unwrap()
    }

    fn seqs(batches: &[Batch]) -> Vec<Vec<&str>> {
        batches.iter().map(|b| b.iter().map(|r| r.sequence_number).collect()).collect()
    }

    #[test]
    fn a_swap_gets_back_exactly_what_follows_the_checkpoint() {
        let mut kept = Unacknowledged::new(Budget::new(1 << 20));
        kept.delivered(batch(&["1", "2"]), None);
        kept.delivered(batch(&["3", "4"]), None);
        let again = kept.since(Some(&at("3"))).unwrap();
        assert_eq!(seqs(&again), [vec!["4"]], "batch 1-2 is covered, 3 is checkpointed");
        assert_eq!(kept.batches.len(), 1, "covered batches are dropped");
        assert_eq!(kept.since(None).unwrap().len(), 1);
    }

    #[test]
    fn shards_share_the_budget_and_one_over_it_keeps_nothing_until_its_next_checkpoint() {
        let budget = Budget::new(16); // four records of four bytes
        let (mut a, mut b) = (Unacknowledged::new(budget.clone()), Unacknowledged::new(budget.clone()));
        a.delivered(batch(&["1", "2", "3"]), None);
        b.delivered(batch(&["10", "11"]), None);
        assert_eq!(budget.used(), 12, "b's batch did not fit beside a's");
        assert!(b.since(None).is_none(), "b cannot re-deliver: a swap restarts it from its checkpoint");

        b.delivered(batch(&["12"]), Some(&at("10")));
        assert!(b.since(Some(&at("10"))).is_none(), "still short of 11 and 12");
        a.delivered(batch(&["4"]), Some(&at("3")));
        assert_eq!(budget.used(), 4, "a's checkpoint gave back what it covered");
        b.delivered(batch(&["13"]), Some(&at("12")));
        assert_eq!(seqs(&b.since(Some(&at("12"))).unwrap()), [vec!["13"]], "past its checkpoint, b keeps again");

        drop(a);
        drop(b);
        assert_eq!(budget.used(), 0, "a shard that ends gives its part back");
    }
}
