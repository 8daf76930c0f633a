//! Routing a shard's records to its instances. A key (a record's explicit
//! hash key, or else its partition key — each user record's, in a KPL
//! aggregate) stays in one lane while any of its records is queued or in a
//! call there, so its records are processed in order by one instance; a key
//! with none goes to the lane with the least work. Unlike a hash of the key
//! modulo N, 16 keys on 8 instances load each with 2.
//!
//! A call never holds records from both sides of an epoch's end (every
//! N × `--max-records` records of the shard): whatever calls are finished,
//! the end of a finished epoch is a checkpoint that cuts no call in two,
//! where the host commits their state changes (`super::state`).

use std::collections::HashMap;

use crate::records::{Batch, Record};

/// What one instance is given in one call, with the records' ordinals
/// ([`super::progress::Progress`]).
pub(super) struct Call {
    pub(super) records: Batch,
    pub(super) ordinals: Vec<u64>,
}

/// The records waiting for each lane, in shard order, and where each key is.
pub(super) struct Lanes {
    queues: Vec<Call>,
    /// Records queued or in a call, per lane.
    load: Vec<usize>,
    /// The lane of each key with records queued or in a call, and how many.
    keys: HashMap<String, (usize, usize)>,
    /// Most records one call is given (`--max-records`).
    call_records: usize,
    /// Records per epoch: no call spans two.
    epoch: u64,
}

/// What orders a record: the explicit hash key when it has one.
fn key<'a>(record: &Record<'a>) -> &'a str {
    record.explicit_hash_key.unwrap_or(record.partition_key)
}

impl Lanes {
    /// `lanes` empty queues.
    pub(super) fn new(lanes: usize, call_records: usize) -> Self {
        let queues = (0..lanes).map(|_| Call { records: Batch::default(), ordinals: Vec::new() }).collect();
        Self { queues, load: vec![0; lanes], keys: HashMap::new(), call_records, epoch: (lanes * call_records) as u64 }
    }

    /// Queues `batch`, whose first record has ordinal `first`.
    pub(super) fn route(&mut self, batch: &Batch, first: u64) {
        for (i, record) in batch.iter().enumerate() {
            let lane = match self.keys.get_mut(key(&record)) {
                Some((lane, records)) => {
                    *records += 1;
                    *lane
                }
                None => {
                    let lane = (0..self.load.len()).min_by_key(|lane| self.load[*lane]).expect("at least one lane");
                    self.keys.insert(key(&record).to_owned(), (lane, 1));
                    lane
                }
            };
            self.load[lane] += 1;
            let queue = &mut self.queues[lane];
            queue.records.push(record);
            queue.ordinals.push(first + i as u64);
        }
        for queue in &mut self.queues {
            queue.records.millis_behind_latest = batch.millis_behind_latest;
        }
    }

    /// The next call of `lane`: up to `call_records` of its oldest
    /// records, all of one epoch.
    pub(super) fn take(&mut self, lane: usize) -> Option<Call> {
        let queue = &mut self.queues[lane];
        let first = *queue.ordinals.first()?;
        let epoch_end = (first / self.epoch + 1) * self.epoch;
        let n = queue.ordinals[..queue.ordinals.len().min(self.call_records)].partition_point(|&ordinal| ordinal < epoch_end);
        let records = queue.records.slice(0, n);
        queue.records = queue.records.slice(n, queue.ordinals.len() - n);
        let ordinals = queue.ordinals.drain(..n).collect();
        Some(Call { records, ordinals })
    }

    /// `call` of `lane` is done: its keys may move once none of their
    /// records is left there.
    pub(super) fn finished(&mut self, lane: usize, call: &Call) {
        self.load[lane] -= call.ordinals.len();
        for record in call.records.iter() {
            if let Some((_, records)) = self.keys.get_mut(key(&record)) {
                *records -= 1;
                if *records == 0 {
                    self.keys.remove(key(&record));
                }
            }
        }
    }

    /// Records queued in all lanes (not counting those in calls).
    pub(super) fn queued(&self) -> usize {
        self.queues.iter().map(|q| q.ordinals.len()).sum()
    }

    /// Bytes of record data queued in all lanes.
    pub(super) fn queued_bytes(&self) -> usize {
        self.queues.iter().map(|q| q.records.data.len()).sum()
    }

    /// How many more records the busiest lane has (queued or in a call)
    /// than the least busy: how far the slowest instance trails the fastest.
    pub(super) fn spread(&self) -> usize {
        self.load.iter().max().unwrap_or(&0) - self.load.iter().min().unwrap_or(&0)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// `n` records cycling through `keys` (data: the key), sequence numbers from 0.
    fn interleaved(keys: &[&str], n: usize, explicit: Option<&str>) -> Batch {
        let sequence_numbers: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        sequence_numbers
            .iter()
            .enumerate()
            .map(|(i, s)| Record {
                data: keys[i % keys.len()].as_bytes(),
                partition_key: keys[i % keys.len()],
                sequence_number: s,
                sub_sequence_number: None,
                arrival_timestamp_ms: 0,
                explicit_hash_key: explicit,
            })
            .collect()
    }

    /// Every call of every lane, taken until all are empty: (lane, call).
    fn drain(lanes: &mut Lanes) -> Vec<(usize, Call)> {
        let mut calls = Vec::new();
        for lane in 0..lanes.queues.len() {
            while let Some(call) = lanes.take(lane) {
                calls.push((lane, call));
            }
        }
        calls
    }

    #[test]
    fn each_key_stays_in_one_lane_in_order_the_lanes_share_the_keys_and_calls_are_capped() {
        let keys: Vec<String> = (0..16).map(|k| format!("key-{k}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut lanes = Lanes::new(8, 6);
        lanes.route(&interleaved(&keys, 160, None), 1000);
        assert_eq!((lanes.queued(), lanes.spread()), (160, 0));
        let mut seen = BTreeMap::<String, (usize, Vec<u64>)>::new();
        for (lane, call) in drain(&mut lanes) {
            assert!(call.records.len() <= 6 && call.records.len() == call.ordinals.len());
            for (record, ordinal) in call.records.iter().zip(&call.ordinals) {
                assert_eq!(record.sequence_number.parse::<u64>().unwrap() + 1000, *ordinal);
                let (owner, ordinals) = seen.entry(record.partition_key.to_owned()).or_insert((lane, vec![]));
                assert_eq!(*owner, lane, "one key, one lane");
                ordinals.push(*ordinal);
            }
        }
        assert_eq!(lanes.queued(), 0);
        for (_, ordinals) in seen.values() {
            assert!(ordinals.windows(2).all(|w| w[0] < w[1]), "in shard order");
        }
        let mut per_lane = BTreeMap::<usize, usize>::new();
        seen.values().for_each(|(lane, _)| *per_lane.entry(*lane).or_default() += 1);
        assert_eq!(per_lane.into_values().collect::<Vec<_>>(), [2; 8], "16 keys, 2 per lane");
    }

    #[test]
    fn a_key_moves_only_once_none_of_its_records_is_left_in_its_lane() {
        let mut lanes = Lanes::new(2, 10);
        lanes.route(&interleaved(&["a", "b"], 4, None), 0);
        let calls = drain(&mut lanes);
        let lane_of = |calls: &[(usize, Call)], key: &[u8]| calls.iter().find(|(_, c)| c.records.iter().any(|r| r.data == key)).unwrap().0;
        let a = lane_of(&calls, b"a");
        // "b" is done, "a" is not: more "a" must follow it, and "c" goes to the idle lane.
        let (_, b_call) = calls.iter().find(|(lane, _)| *lane != a).unwrap();
        lanes.finished(1 - a, b_call);
        lanes.route(&interleaved(&["a", "c"], 2, None), 4);
        let again = drain(&mut lanes);
        assert_eq!(lane_of(&again, b"a"), a, "a is still in a call in its lane");
        assert_eq!(lane_of(&again, b"c"), 1 - a, "the least busy lane");
        assert_eq!(lanes.spread(), 2, "a's lane: 2 in a call and 1 queued; c's: 1 (b's 2 are done)");
    }

    #[test]
    fn records_of_one_explicit_hash_key_share_a_lane_whatever_their_partition_keys() {
        let mut lanes = Lanes::new(4, 100);
        lanes.route(&interleaved(&["p", "q", "r", "s"], 8, Some("42")), 0);
        let used: BTreeSet<usize> = drain(&mut lanes).into_iter().map(|(lane, _)| lane).collect();
        assert_eq!(used.len(), 1);
    }

    #[test]
    fn no_call_spans_the_end_of_an_epoch() {
        // 2 lanes of calls of 4: an epoch is 8 records, and one key has them all.
        let mut lanes = Lanes::new(2, 4);
        lanes.route(&interleaved(&["a"], 6, None), 5);
        let calls: Vec<Vec<u64>> = drain(&mut lanes).into_iter().map(|(_, call)| call.ordinals).collect();
        assert_eq!(calls, [vec![5, 6, 7], vec![8, 9, 10]], "cut at 8, then up to 4 records");
    }
}
