//! Reading one shard of a DynamoDB stream with GetRecords: iterators (which
//! expire after 15 minutes), the 1,000-records-or-1-MB answers, a shard past
//! the stream's 24 hours, and the end of a closed shard with its children.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use aws_sdk_dynamodbstreams::Client;
use tokio::time::Instant;

use super::record;
use crate::aws::{AwsError, Service};
use crate::backoff::Backoff;
use crate::clock::unix_ms;
use crate::fetch::{Fetched, ShardReader, StartingPosition};
use crate::metrics::Reads;
use crate::records::{Batch, Position, Record};

/// Most records one GetRecords call returns.
pub const MAX_RECORDS_LIMIT: i32 = 1_000;
/// DynamoDB Streams advises at most two readers per shard; one call every
/// 250 ms is what Lambda's event source mapping makes (4 a second).
const MIN_CALL_INTERVAL: Duration = Duration::from_millis(250);
/// After a throttled or failed call.
const RETRY: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(10));

/// Reads one shard of a DynamoDB stream, in order, from a starting position.
pub struct StreamReader {
    client: Client,
    arn: String,
    shard: String,
    /// The table's partition key attribute (records are routed by its value).
    hash_key: String,
    /// Where a fresh iterator starts: the start, then after the last record read.
    resume: StartingPosition,
    /// Until the first record arrives: what a checkpoint already covers.
    skip_through: Option<Position>,
    iterator: Option<String>,
    limit: i32,
    idle: Duration,
    next_call: Instant,
    retry: Backoff,
}

impl StreamReader {
    /// A reader of `shard` of the stream `arn` from `start`, at most `limit`
    /// records a call, waiting `idle` between reads at the shard's tip.
    pub fn new(client: Client, arn: &str, hash_key: &str, shard: &str, start: StartingPosition, limit: i32, idle: Duration) -> Self {
        Self {
            client,
            arn: arn.to_owned(),
            shard: shard.to_owned(),
            hash_key: hash_key.to_owned(),
            skip_through: start.skip_through(),
            resume: start,
            iterator: None,
            limit: limit.clamp(1, MAX_RECORDS_LIMIT),
            idle,
            next_call: Instant::now(),
            retry: Backoff::new(RETRY.0, RETRY.1),
        }
    }

    /// The next records. A failed call is tried again in place; only an
    /// error that waiting cannot mend (a deleted stream, denied access) is
    /// returned.
    async fn read(&mut self) -> Result<Fetched, AwsError> {
        let mut reads = Reads::default();
        loop {
            tokio::time::sleep_until(self.next_call).await;
            self.next_call = Instant::now() + MIN_CALL_INTERVAL;
            let iterator = match self.iterator.clone() {
                Some(iterator) => iterator,
                None => match self.shard_iterator().await {
                    Ok(Some(iterator)) => iterator,
                    Ok(None) => return Ok(Fetched { batch: Batch::default(), shard_end: Some(BTreeSet::new()), reads, read_at_ms: unix_ms() }),
                    Err(e) => {
                        self.failed(e)?;
                        continue;
                    }
                },
            };
            reads.calls += 1;
            let read_at_ms = unix_ms();
            let output = match self.client.get_records().shard_iterator(&iterator).limit(self.limit).send().await {
                Ok(output) => output,
                Err(e) if e.as_service_error().is_some_and(|s| s.is_expired_iterator_exception()) => {
                    reads.expired += 1;
                    self.iterator = None;
                    continue;
                }
                Err(e) if e.as_service_error().is_some_and(|s| s.is_trimmed_data_access_exception()) => {
                    self.trimmed();
                    continue;
                }
                Err(e) => {
                    let error = AwsError::from_sdk(Service::DynamoDbStreams, "GetRecords", &self.arn, e);
                    reads.throttles += u64::from(matches!(error, AwsError::Throttled { .. }));
                    self.failed(error)?;
                    continue;
                }
            };
            self.retry.reset();
            let mut batch = Batch::default();
            for change in output.records().iter().filter_map(|r| record::change(r, &self.hash_key)) {
                batch.push(Record {
                    data: &change.data,
                    partition_key: &change.partition_key,
                    sequence_number: &change.sequence_number,
                    sub_sequence_number: None,
                    arrival_timestamp_ms: change.created_ms,
                    explicit_hash_key: None,
                });
            }
            if let Some(last) = batch.positions().last() {
                // How old the newest change read is: DynamoDB Streams has no MillisBehindLatest.
                let newest = batch.arrival_timestamps_ms.last().copied().unwrap_or_default();
                batch.millis_behind_latest = unix_ms().saturating_sub(newest);
                self.resume = StartingPosition::After(last.sequence_number().to_owned());
                if let Some(checkpoint) = self.skip_through.take() {
                    batch = batch.after(&checkpoint);
                }
            }
            self.iterator = output.next_shard_iterator;
            if self.iterator.is_none() {
                let children = self.children().await?;
                return Ok(Fetched { batch, shard_end: Some(children), reads, read_at_ms });
            }
            if batch.is_empty() {
                // At the tip (or a gap in an open shard): said once per read, the clock of `--window`.
                self.next_call = Instant::now() + self.idle;
            }
            return Ok(Fetched { batch, shard_end: None, reads, read_at_ms });
        }
    }

    /// A fresh iterator at the resume position; `None` when the stream no
    /// longer lists the shard (past its 24 hours), which ends it like `SHARD_END`.
    async fn shard_iterator(&mut self) -> Result<Option<String>, AwsError> {
        let request = self.client.get_shard_iterator().stream_arn(&self.arn).shard_id(&self.shard);
        let request = match &self.resume {
            StartingPosition::Latest => request.shard_iterator_type(ShardIteratorType::Latest),
            // DynamoDB Streams has no AT_TIMESTAMP (refused at start): the oldest kept.
            StartingPosition::TrimHorizon | StartingPosition::AtTimestamp(_) => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            StartingPosition::At(sequence_number) => request.shard_iterator_type(ShardIteratorType::AtSequenceNumber).sequence_number(sequence_number),
            StartingPosition::Checkpoint(position) => {
                request.shard_iterator_type(ShardIteratorType::AtSequenceNumber).sequence_number(position.sequence_number())
            }
            StartingPosition::After(sequence_number) => {
                request.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(sequence_number)
            }
        };
        match request.send().await {
            Ok(output) => {
                self.iterator = output.shard_iterator;
                Ok(Some(self.iterator.clone().ok_or_else(|| AwsError::Service {
                    operation: "GetShardIterator",
                    code: "NoIterator".into(),
                    message: format!("no iterator returned for {}", self.shard),
                })?))
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_trimmed_data_access_exception()) => {
                self.trimmed();
                Box::pin(self.shard_iterator()).await
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => {
                let shards = super::list_shards(&self.client, &self.arn).await?;
                if shards.iter().any(|s| s.id == self.shard) {
                    return Err(AwsError::Service {
                        operation: "GetShardIterator",
                        code: "ResourceNotFoundException".into(),
                        message: format!("stream `{}` lists shard {} yet could not place its position; reading it again", self.arn, self.shard),
                    });
                }
                tracing::warn!(shard = %self.shard, "the shard is no longer in the stream (past its 24 hours): ending it as if at SHARD_END");
                Ok(None)
            }
            Err(e) => Err(AwsError::from_sdk(Service::DynamoDbStreams, "GetShardIterator", &self.arn, e)),
        }
    }

    /// The position to read from is older than the stream keeps: what was
    /// there is gone, so reading goes on from the oldest change kept.
    fn trimmed(&mut self) {
        tracing::error!(shard = %self.shard, resume = ?self.resume, "the stream no longer keeps the changes at this position (older than 24 hours): continuing from the oldest change it keeps; the changes in between are lost");
        self.resume = StartingPosition::TrimHorizon;
        self.skip_through = None;
        self.iterator = None;
    }

    /// A call failed with `error`: waited on and tried again when waiting
    /// may mend it, returned otherwise.
    fn failed(&mut self, error: AwsError) -> Result<(), AwsError> {
        if !error.is_transient() {
            return Err(error);
        }
        let wait = self.retry.next_wait();
        tracing::warn!(shard = %self.shard, "reading the shard failed: {error}; trying again in place in {wait:?}");
        self.next_call = Instant::now() + wait;
        Ok(())
    }

    /// The shards whose parent is this one: what its `SHARD_END` names.
    async fn children(&self) -> Result<BTreeSet<String>, AwsError> {
        let shards = super::list_shards(&self.client, &self.arn).await?;
        Ok(shards.into_iter().filter(|s| s.parents.contains(&self.shard)).map(|s| s.id).collect())
    }
}

impl ShardReader for StreamReader {
    async fn next(&mut self) -> Result<Fetched, AwsError> {
        self.read().await
    }
}

/// How far `start` is behind the shard's newest change: the age of the
/// first change after it (0 when there is none). `None` for a shard that
/// has no change after `start` and ended (or is no longer in the stream).
pub async fn millis_behind(client: &Client, arn: &str, hash_key: &str, shard: &str, start: StartingPosition) -> Result<Option<u64>, AwsError> {
    let fetched = StreamReader::new(client.clone(), arn, hash_key, shard, start, 1, Duration::ZERO).read().await?;
    let first = fetched.batch.arrival_timestamps_ms.first().copied();
    Ok(match (first, fetched.shard_end) {
        (Some(created_ms), _) => Some(crate::clock::unix_ms().saturating_sub(created_ms)),
        (None, Some(_)) => None,
        (None, None) => Some(0),
    })
}
