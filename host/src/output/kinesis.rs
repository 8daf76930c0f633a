//! A Kinesis stream target: PutRecords in calls of at most 500 records and
//! 5 MiB, retrying only the entries that failed.
//!
//! Order: a partition key's records are written in the order they were
//! sent. After a partial failure, the failed entries are sent again
//! together with every later entry of the same partition keys (so each
//! key's last copies are in order, at the cost of those later entries
//! appearing twice), and nothing after the failed call is sent before them.

use std::collections::HashMap;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use aws_sdk_kinesis::Client;

use super::record::OutRecord;
use super::target::{retrying, Attempt, Retries, Target, WriteFuture, PATIENCE};
use crate::backoff::Backoff;
use crate::aws::{AwsError, Service};

/// Most records one PutRecords call takes.
const MAX_RECORDS: usize = 500;
/// Most bytes (data plus partition keys) one PutRecords call takes.
const MAX_BYTES: usize = 5 << 20;
/// Most bytes of one record's data plus partition key.
const MAX_RECORD: usize = 1 << 20;

/// PutRecords to one stream.
pub struct KinesisTarget {
    client: Client,
    /// A name, or an ARN.
    stream: String,
}

impl KinesisTarget {
    /// Writes to `stream` (a name or an ARN) with `client`.
    pub fn new(client: Client, stream: String) -> Self {
        Self { client, stream }
    }

    /// One PutRecords call with the records at `indexes`: the indexes that failed, in order.
    async fn put(&self, records: &[OutRecord<'_>], indexes: &[usize]) -> Attempt<Vec<usize>> {
        let entries = indexes.iter().map(|&i| {
            let r = &records[i];
            PutRecordsRequestEntry::builder()
                .data(Blob::new(r.data))
                .partition_key(r.partition_key)
                .set_explicit_hash_key(r.explicit_hash_key.map(str::to_owned))
                .build()
                .expect("data and partition key are set")
        });
        let request = self.client.put_records().set_records(Some(entries.collect()));
        let request = if self.stream.starts_with("arn:") { request.stream_arn(&self.stream) } else { request.stream_name(&self.stream) };
        match request.send().await {
            Ok(output) => Attempt::Done(
                output.records().iter().zip(indexes).filter(|(entry, _)| entry.error_code().is_some()).map(|(_, &i)| i).collect(),
            ),
            // Every error may pass (a stream being created again, throttling,
            // an outage); `retrying` gives up after its patience.
            Err(e) => Attempt::Again(AwsError::from_sdk(Service::Kinesis, "PutRecords", &self.stream, e).to_string()),
        }
    }
}

/// The next call's indexes from `pending`: at most [`MAX_RECORDS`] and [`MAX_BYTES`].
fn next_call(records: &[OutRecord<'_>], pending: &[usize]) -> usize {
    let mut bytes = 0;
    pending
        .iter()
        .take(MAX_RECORDS)
        .take_while(|&&i| {
            bytes += records[i].data.len() + records[i].partition_key.len();
            bytes <= MAX_BYTES
        })
        .count()
        .max(1)
}

/// What to send after a call of `sent` in which `failed` failed, with
/// `unsent` still to go: the failed entries, the later entries of their
/// partition keys in that call, then the rest — in the order they were sent.
fn after_partial_failure(records: &[OutRecord<'_>], sent: &[usize], failed: &[usize], unsent: &[usize]) -> Vec<usize> {
    // Each failed key's first failure: what follows it of that key goes again.
    let mut first_failure: HashMap<&str, usize> = HashMap::new();
    for &i in failed {
        let first = first_failure.entry(records[i].partition_key).or_insert(i);
        *first = (*first).min(i);
    }
    let again = sent.iter().copied().filter(|&i| first_failure.get(records[i].partition_key).is_some_and(|&first| i >= first));
    again.chain(unsent.iter().copied()).collect()
}

impl Target for KinesisTarget {
    fn check(&self, record: &OutRecord<'_>) -> Result<(), String> {
        let key = record.partition_key.chars().count();
        if !(1..=256).contains(&key) {
            return Err(format!("a Kinesis partition key has 1 to 256 characters; this one has {key}"));
        }
        if record.data.len() + record.partition_key.len() > MAX_RECORD {
            return Err(format!("a Kinesis record is at most 1 MiB with its partition key; this one has {} bytes", record.data.len() + record.partition_key.len()));
        }
        Ok(())
    }

    fn write<'a>(&'a self, records: &'a [OutRecord<'a>], retries: &'a Retries) -> WriteFuture<'a> {
        Box::pin(async move {
            let mut pending: Vec<usize> = (0..records.len()).collect();
            let target = format!("kinesis:{}", self.stream);
            // Partial failures (throttled entries) are retried with a backoff,
            // within the same patience as a failing call.
            let deadline = tokio::time::Instant::now() + PATIENCE;
            let mut backoff = Backoff::new(std::time::Duration::from_millis(100), std::time::Duration::from_secs(2));
            while !pending.is_empty() {
                let call = next_call(records, &pending);
                let failed = retrying(&target, retries, || self.put(records, &pending[..call])).await?;
                if failed.is_empty() {
                    pending.drain(..call);
                    backoff.reset();
                    continue;
                }
                pending = after_partial_failure(records, &pending[..call], &failed, &pending[call..]);
                retries.fetch_add(failed.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let wait = backoff.next_wait();
                if tokio::time::Instant::now() + wait >= deadline {
                    return Err(format!("{target}: {} of {call} entries still refused after {PATIENCE:?} (throttled?)", failed.len()));
                }
                tracing::debug!("{target}: {} of {call} entries failed; sending them (and what follows them per key) again in {wait:?}", failed.len());
                tokio::time::sleep(wait).await;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records<'a>(keys: &[&'a str]) -> Vec<OutRecord<'a>> {
        keys.iter().map(|k| OutRecord { data: &[0; 10], partition_key: k, explicit_hash_key: None }).collect()
    }

    #[test]
    fn a_retry_keeps_each_partition_keys_order() {
        // a0 b1 a2 c3 b4 | d5: entry 1 (key b) failed.
        let r = records(&["a", "b", "a", "c", "b", "d"]);
        let again = after_partial_failure(&r, &[0, 1, 2, 3, 4], &[1], &[5]);
        assert_eq!(again, [1, 4, 5], "b's later record goes again after b1; a and c were written in order");
        // a0 failed, a2 too: both again, in order; b1 and c3 stay written.
        assert_eq!(after_partial_failure(&r, &[0, 1, 2, 3], &[0, 2], &[]), [0, 2]);
    }

    #[test]
    fn calls_stay_within_the_record_and_byte_limits() {
        let r = records(&vec!["k"; 1200]);
        let all: Vec<usize> = (0..r.len()).collect();
        assert_eq!(next_call(&r, &all), MAX_RECORDS);
        let mib = vec![0; 1 << 20];
        let big: Vec<OutRecord> = (0..8).map(|_| OutRecord { data: &mib, partition_key: "k", explicit_hash_key: None }).collect();
        assert_eq!(next_call(&big, &(0..8).collect::<Vec<_>>()), 4, "5 MiB holds four records of 1 MiB and a key");
    }

    #[test]
    fn records_kinesis_would_refuse_are_refused_when_sent() {
        let target = KinesisTarget::new(Client::from_conf(aws_sdk_kinesis::Config::builder().behavior_version_latest().build()), "s".into());
        assert!(target.check(&records(&[""])[0]).unwrap_err().contains("1 to 256 characters"));
        let mib = vec![0; 1 << 20];
        let big = OutRecord { data: &mib, partition_key: "k", explicit_hash_key: None };
        assert!(target.check(&big).unwrap_err().contains("at most 1 MiB"));
    }
}
