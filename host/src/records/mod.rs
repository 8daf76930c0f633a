//! The record path's own types, apart from AWS and WebAssembly: a batch of
//! Kinesis records stored as columns — what the fetcher and `replay` build
//! and what the runtime hands a processor (moved, not copied, into the WIT
//! 0.2 `batch`) — and positions in a shard.

pub mod kpl;
mod position;

pub use position::{NotASequenceNumber, Position};

/// A record's `flags`: a user record from a KPL aggregate (it has a
/// sub-sequence number).
pub const AGGREGATED: u8 = 1;
/// A record's `flags`: it has an explicit hash key.
pub const EXPLICIT_HASH_KEY: u8 = 2;

/// Records in shard order, as columns: record `i`'s data is
/// `data[data_ends[i-1]..data_ends[i]]` (from 0 for the first), and each
/// string column is cut the same way by its `_ends`. The layout is the WIT
/// `kcl:processor/types.batch` of 0.2, field for field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Every record's data, one after another.
    pub data: Vec<u8>,
    /// Where each record's data ends in `data`.
    pub data_ends: Vec<u32>,
    /// Every partition key, one after another.
    pub partition_keys: String,
    /// Where each partition key ends.
    pub partition_key_ends: Vec<u32>,
    /// Every sequence number, one after another.
    pub sequence_numbers: String,
    /// Where each sequence number ends.
    pub sequence_number_ends: Vec<u32>,
    /// When Kinesis accepted each record, in ms since the Unix epoch.
    pub arrival_timestamps_ms: Vec<u64>,
    /// Each record's position in its KPL aggregate (0 if not aggregated).
    pub sub_sequence_numbers: Vec<u64>,
    /// Every explicit hash key, one after another.
    pub explicit_hash_keys: String,
    /// Where each explicit hash key ends.
    pub explicit_hash_key_ends: Vec<u32>,
    /// One `record-flags` byte per record.
    pub flags: Vec<u8>,
    /// How far this batch is behind the tip of the shard.
    pub millis_behind_latest: u64,
}

/// One record, borrowed from a [`Batch`] (or on its way into one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The record's data.
    pub data: &'a [u8],
    /// Its partition key.
    pub partition_key: &'a str,
    /// Its sequence number.
    pub sequence_number: &'a str,
    /// Set for a user record de-aggregated from a KPL aggregate.
    pub sub_sequence_number: Option<u64>,
    /// When Kinesis accepted the record, in milliseconds since the Unix epoch.
    pub arrival_timestamp_ms: u64,
    /// Its explicit hash key, when it was put with one.
    pub explicit_hash_key: Option<&'a str>,
}

impl Record<'_> {
    /// Where this record is, as a checkpoint would name it.
    pub fn position(&self) -> Result<Position, NotASequenceNumber> {
        Position::new(self.sequence_number, self.sub_sequence_number.unwrap_or(0))
    }
}

/// `column[ends[i-1]..ends[i]]`.
fn cut<'a, T: ?Sized + std::ops::Index<std::ops::Range<usize>, Output = T>>(column: &'a T, ends: &[u32], i: usize) -> &'a T {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &column[start..ends[i] as usize]
}

/// Appends `value` to a column and its end offset.
fn append(column: &mut String, ends: &mut Vec<u32>, value: &str) {
    column.push_str(value);
    ends.push(column.len() as u32);
}

impl Batch {
    /// How many records.
    pub fn len(&self) -> usize {
        self.data_ends.len()
    }

    /// Whether the batch has no records.
    pub fn is_empty(&self) -> bool {
        self.data_ends.is_empty()
    }

    /// Appends a record.
    pub fn push(&mut self, record: Record<'_>) {
        self.data.extend_from_slice(record.data);
        self.data_ends.push(self.data.len() as u32);
        append(&mut self.partition_keys, &mut self.partition_key_ends, record.partition_key);
        append(&mut self.sequence_numbers, &mut self.sequence_number_ends, record.sequence_number);
        append(&mut self.explicit_hash_keys, &mut self.explicit_hash_key_ends, record.explicit_hash_key.unwrap_or(""));
        self.arrival_timestamps_ms.push(record.arrival_timestamp_ms);
        self.sub_sequence_numbers.push(record.sub_sequence_number.unwrap_or(0));
        let flags = if record.sub_sequence_number.is_some() { AGGREGATED } else { 0 }
            | if record.explicit_hash_key.is_some() { EXPLICIT_HASH_KEY } else { 0 };
        self.flags.push(flags);
    }

    /// Record `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<Record<'_>> {
        let flags = *self.flags.get(i)?;
        Some(Record {
            data: cut(self.data.as_slice(), &self.data_ends, i),
            partition_key: cut(self.partition_keys.as_str(), &self.partition_key_ends, i),
            sequence_number: cut(self.sequence_numbers.as_str(), &self.sequence_number_ends, i),
            sub_sequence_number: (flags & AGGREGATED != 0).then(|| self.sub_sequence_numbers[i]),
            arrival_timestamp_ms: self.arrival_timestamps_ms[i],
            explicit_hash_key: (flags & EXPLICIT_HASH_KEY != 0)
                .then(|| cut(self.explicit_hash_keys.as_str(), &self.explicit_hash_key_ends, i)),
        })
    }

    /// The records in order.
    pub fn iter(&self) -> impl Iterator<Item = Record<'_>> {
        (0..self.len()).map(|i| self.get(i).expect("in range"))
    }

    /// Where record `i` is, as a checkpoint would name it.
    pub fn position(&self, i: usize) -> Option<Position> {
        self.get(i)?.position().ok()
    }

    /// The positions of every record, without the data: what a checkpoint
    /// can name once the batch itself has moved on.
    pub fn positions(&self) -> Positions {
        Positions {
            sequence_numbers: self.sequence_numbers.clone(),
            sequence_number_ends: self.sequence_number_ends.clone(),
            sub_sequence_numbers: self.sub_sequence_numbers.clone(),
            flags: self.flags.clone(),
        }
    }

    /// `n` records from record `from` on, copied.
    pub fn slice(&self, from: usize, n: usize) -> Batch {
        let mut slice: Batch = self.iter().skip(from).take(n).collect();
        slice.millis_behind_latest = self.millis_behind_latest;
        slice
    }

    /// The records after `position` only: a restart at a checkpoint inside
    /// an aggregate reads the aggregate again and skips what was done.
    pub fn after(&self, position: &Position) -> Batch {
        let mut kept = Batch { millis_behind_latest: self.millis_behind_latest, ..Batch::default() };
        for record in self.iter().filter(|r| r.position().is_ok_and(|p| p > *position)) {
            kept.push(record);
        }
        kept
    }
}

/// The positions of a batch's records ([`Batch::positions`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Positions {
    sequence_numbers: String,
    sequence_number_ends: Vec<u32>,
    sub_sequence_numbers: Vec<u64>,
    flags: Vec<u8>,
}

impl Positions {
    /// How many positions.
    pub fn len(&self) -> usize {
        self.sequence_number_ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.sequence_number_ends.is_empty()
    }

    fn sequence_number(&self, i: usize) -> &str {
        cut(self.sequence_numbers.as_str(), &self.sequence_number_ends, i)
    }

    /// Record `i`'s position. Sequence numbers come from Kinesis (or replay,
    /// which validates its input), so one that does not parse is `None`.
    pub fn get(&self, i: usize) -> Option<Position> {
        let flags = *self.flags.get(i)?;
        let sub = if flags & AGGREGATED != 0 { self.sub_sequence_numbers[i] } else { 0 };
        Position::new(self.sequence_number(i), sub).ok()
    }

    /// The last position, if any.
    pub fn last(&self) -> Option<Position> {
        self.get(self.len().checked_sub(1)?)
    }

    /// The last user record of Kinesis record `sequence_number`, if it is here.
    pub fn last_of(&self, sequence_number: &str) -> Option<Position> {
        (0..self.len()).rev().find(|&i| self.sequence_number(i) == sequence_number).and_then(|i| self.get(i))
    }
}

impl<'a> FromIterator<Record<'a>> for Batch {
    fn from_iter<I: IntoIterator<Item = Record<'a>>>(records: I) -> Self {
        let mut batch = Batch::default();
        records.into_iter().for_each(|r| batch.push(r));
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(data: &'a str, seq: &'a str, sub: Option<u64>, key: Option<&'a str>) -> Record<'a> {
        Record {
            data: data.as_bytes(),
            partition_key: "pk",
            sequence_number: seq,
            sub_sequence_number: sub,
            arrival_timestamp_ms: 7,
            explicit_hash_key: key,
        }
    }

    #[test]
    fn records_come_back_as_they_went_in() {
        let records = [record("a", "1", None, None), record("", "2", Some(0), Some("42")), record("ccc", "2", Some(1), None)];
        let batch: Batch = records.iter().copied().collect();
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.iter().collect::<Vec<_>>(), records);
        assert_eq!(batch.data, b"accc");
        assert_eq!(batch.flags, [0, AGGREGATED | EXPLICIT_HASH_KEY, AGGREGATED]);
    }

    #[test]
    fn after_skips_through_a_position_inside_an_aggregate() {
        let batch: Batch = [record("a", "2", Some(0), None), record("b", "2", Some(1), None), record("c", "3", None, None)]
            .into_iter()
            .collect();
        let rest = batch.after(&Position::new("2", 0).unwrap());
        assert_eq!(rest.iter().map(|r| r.data).collect::<Vec<_>>(), [b"b", b"c"]);
    }
}
