//! KPL aggregate records: one Kinesis record carrying many user records, as
//! the Kinesis Producer Library writes them — the magic `F3 89 9A C2`, a
//! protobuf `AggregatedRecord`, and the MD5 of that protobuf. A record that
//! has the magic but fails the check is delivered as it is, as KCL does.

use md5::{Digest, Md5};
use prost::Message;

use super::{Batch, Record};

/// The first four bytes of every KPL aggregate.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const DIGEST_LEN: usize = 16;

/// `AggregatedRecord` of the KPL's `messages.proto`.
#[derive(Clone, PartialEq, Message)]
struct AggregatedRecord {
    #[prost(string, repeated, tag = "1")]
    partition_key_table: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    explicit_hash_key_table: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    records: Vec<UserRecord>,
}

/// `Record` of `messages.proto` (its `tags` are not read).
#[derive(Clone, PartialEq, Message)]
struct UserRecord {
    #[prost(uint64, required, tag = "1")]
    partition_key_index: u64,
    #[prost(uint64, optional, tag = "2")]
    explicit_hash_key_index: Option<u64>,
    #[prost(bytes = "vec", required, tag = "3")]
    data: Vec<u8>,
}

/// A shard's range of hash keys, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashRange {
    /// The first hash key of the range.
    pub start: u128,
    /// The last hash key of the range.
    pub end: u128,
}

impl HashRange {
    /// From the decimal strings Kinesis (and the lease table) give.
    pub fn parse(start: &str, end: &str) -> Option<Self> {
        Some(Self { start: start.parse().ok()?, end: end.parse().ok()? })
    }

    /// Whether a user record belongs here: its [`hash_key`] is in range.
    pub fn contains(&self, partition_key: &str, explicit_hash_key: Option<&str>) -> bool {
        (self.start..=self.end).contains(&hash_key(partition_key, explicit_hash_key))
    }
}

/// Where Kinesis places a record: its explicit hash key, or else the MD5
/// of its partition key read as a 128-bit number.
pub fn hash_key(partition_key: &str, explicit_hash_key: Option<&str>) -> u128 {
    match explicit_hash_key.and_then(|k| k.parse::<u128>().ok()) {
        Some(hash) => hash,
        None => u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into()),
    }
}

/// Appends `record` to `batch`: each of its user records if it is a KPL
/// aggregate (with its sub-sequence number and keys), else the record as it
/// is. User records outside `range` (an aggregate written before a reshard
/// may hold records of the sibling shard) are dropped; returns how many.
pub fn push(batch: &mut Batch, record: Record<'_>, range: Option<&HashRange>) -> usize {
    let Some(aggregate) = decode(record.data) else {
        batch.push(record);
        return 0;
    };
    fn entry(table: &[String], index: Option<u64>) -> Option<&str> {
        table.get(usize::try_from(index?).ok()?).map(String::as_str)
    }
    let mut dropped = 0;
    for (index, user) in aggregate.records.iter().enumerate() {
        let partition_key = entry(&aggregate.partition_key_table, Some(user.partition_key_index)).unwrap_or("");
        let explicit_hash_key = entry(&aggregate.explicit_hash_key_table, user.explicit_hash_key_index);
        if range.is_some_and(|r| !r.contains(partition_key, explicit_hash_key)) {
            dropped += 1;
            continue;
        }
        batch.push(Record {
            data: &user.data,
            partition_key,
            sub_sequence_number: Some(index as u64),
            explicit_hash_key,
            ..record
        });
    }
    dropped
}

/// The aggregate in `data`, if it is a well-formed one.
fn decode(data: &[u8]) -> Option<AggregatedRecord> {
    let body = data.strip_prefix(&MAGIC)?;
    let (message, digest) = body.split_at_checked(body.len().checked_sub(DIGEST_LEN)?)?;
    if Md5::digest(message).as_slice() != digest {
        return None;
    }
    AggregatedRecord::decode(message).ok()
}

/// Encodes user records `(partition key, explicit hash key, data)` as one
/// aggregate, the way the KPL does; for producers and tests.
pub fn encode<'a>(records: impl IntoIterator<Item = (&'a str, Option<&'a str>, &'a [u8])>) -> Vec<u8> {
    let mut aggregate = AggregatedRecord::default();
    for (partition_key, explicit_hash_key, data) in records {
        let index = |table: &mut Vec<String>, value: &str| {
            table.iter().position(|v| v == value).unwrap_or_else(|| {
                table.push(value.to_owned());
                table.len() - 1
            }) as u64
        };
        aggregate.records.push(UserRecord {
            partition_key_index: index(&mut aggregate.partition_key_table, partition_key),
            explicit_hash_key_index: explicit_hash_key.map(|k| index(&mut aggregate.explicit_hash_key_table, k)),
            data: data.to_vec(),
        });
    }
    let message = aggregate.encode_to_vec();
    [&MAGIC[..], &message, Md5::digest(&message).as_slice()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinesis_record(data: &[u8]) -> Record<'_> {
        Record {
            data,
            partition_key: "outer",
            sequence_number: "42",
            sub_sequence_number: None,
            arrival_timestamp_ms: 9,
            explicit_hash_key: None,
        }
    }

    #[test]
    fn an_aggregate_becomes_its_user_records() {
        let data = encode([("a", None, &b"one"[..]), ("b", Some("7"), b"two"), ("a", None, b"three")]);
        let mut batch = Batch::default();
        assert_eq!(push(&mut batch, kinesis_record(&data), None), 0);
        let records: Vec<_> = batch.iter().collect();
        assert_eq!(records.len(), 3);
        assert_eq!((records[1].data, records[1].partition_key, records[1].explicit_hash_key), (&b"two"[..], "b", Some("7")));
        assert_eq!(records.iter().map(|r| r.sub_sequence_number).collect::<Vec<_>>(), [Some(0), Some(1), Some(2)]);
        assert!(records.iter().all(|r| r.sequence_number == "42" && r.arrival_timestamp_ms == 9));
    }

    #[test]
    fn a_record_that_fails_the_check_is_delivered_as_it_is() {
        let mut data = encode([("a", None, &b"one"[..])]);
        let last = data.len() - 1;
        data[last] ^= 1; // a wrong MD5
        for data in [&data[..], &MAGIC[..], b"plain"] {
            let mut batch = Batch::default();
            push(&mut batch, kinesis_record(data), None);
            assert_eq!(batch.iter().collect::<Vec<_>>(), [kinesis_record(data)]);
        }
    }

    #[test]
    fn user_records_of_another_shard_are_dropped() {
        // Explicit hash keys put one record in each half of the key space.
        let low = "1";
        let high = (u128::MAX - 1).to_string();
        let data = encode([("a", Some(low), &b"mine"[..]), ("b", Some(high.as_str()), b"sibling's")]);
        let mut batch = Batch::default();
        let lower_half = HashRange { start: 0, end: u128::MAX / 2 };
        assert_eq!(push(&mut batch, kinesis_record(&data), Some(&lower_half)), 1);
        assert_eq!(batch.iter().map(|r| r.data).collect::<Vec<_>>(), [b"mine"]);
        assert_eq!(batch.get(0).unwrap().sub_sequence_number, Some(0), "sub-sequence numbers are the aggregate's");
    }

    #[test]
    fn a_partition_key_hashes_with_md5() {
        // MD5("a") = 0cc175b9c0f1b6a831c399e269772661.
        let hash = 0x0cc175b9c0f1b6a831c399e269772661u128;
        assert!(HashRange { start: hash, end: hash }.contains("a", None));
        assert!(!HashRange { start: hash + 1, end: u128::MAX }.contains("a", None));
    }
}
