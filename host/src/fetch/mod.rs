//! Reading a shard with GetRecords: iterators, Kinesis' per-shard limits,
//! expired iterators, throttling, the end of a closed shard, and KPL
//! aggregates turned into their user records.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_kinesis::types::ShardIteratorType;
use aws_sdk_kinesis::Client;
use aws_smithy_types::DateTime;
use tokio::time::Instant;

use aws_sdk_kinesis::config::retry::RetryConfig;
use aws_sdk_kinesis::config::timeout::TimeoutConfig;
use aws_sdk_kinesis::error::SdkError;
use aws_sdk_kinesis::operation::get_records::{GetRecordsError, GetRecordsOutput};
use aws_sdk_kinesis::config::http::HttpResponse;

use crate::aws::{AwsError, Service};
use crate::backoff::Backoff;
use crate::clock::unix_ms;
use crate::hedge::{Asked, Hedge};
use crate::metrics::Reads;

mod prefetch;
mod response;
pub use prefetch::{prefetch, Prefetch};
pub(crate) use response::user_records;
use crate::records::{kpl, Batch, Position};

/// Kinesis allows 5 GetRecords calls per second per shard, across every
/// application reading the stream. One call at most every 400 ms — at most
/// 3 in any rolling second — leaves the other 2 to a second application.
const MIN_CALL_INTERVAL: Duration = Duration::from_millis(400);
/// After a throttled call: waits at least as long as the SDK's standard
/// retry would (which is off for GetRecords: this reader paces itself).
const THROTTLED: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(10));
/// After a failed call (5xx, a reset, a time-out): tried again in place, soon.
const FAILED: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(1));
/// Longest one GetRecords call may take: a full answer is 10 MB, and a slow
/// server (or link) takes its time over it. A call that takes longer is
/// tried again in place asking for half as many records.
const GET_RECORDS_TIMEOUT: Duration = Duration::from_secs(30);
/// The fewest records a call asks for after time-outs halved the limit.
const MIN_LIMIT: i32 = 100;
/// Most records one GetRecords call may return.
pub const MAX_RECORDS_LIMIT: i32 = 10_000;

/// Where reading starts.
#[derive(Clone, Debug, PartialEq)]
pub enum StartingPosition {
    /// The oldest record still kept.
    TrimHorizon,
    /// Records put from now on.
    Latest,
    /// Milliseconds since the Unix epoch.
    AtTimestamp(i64),
    /// At a record (included): where a failed attempt that had no
    /// checkpoint yet started delivering.
    At(String),
    /// Just after a checkpoint: its record is read again and the user
    /// records at or before the checkpoint are skipped (a checkpoint may
    /// point inside a KPL aggregate).
    Checkpoint(Position),
    /// Just after a record read in full.
    After(String),
}

impl StartingPosition {
    /// What the first records read from here may include that a checkpoint
    /// already covers.
    pub(crate) fn skip_through(&self) -> Option<Position> {
        match self {
            StartingPosition::Checkpoint(position) => Some(position.clone()),
            _ => None,
        }
    }
}

/// A shard's reader, by GetRecords ([`Fetcher`]) or by an enhanced fan-out
/// subscription ([`crate::fanout::Subscriber`]).
pub trait ShardReader: Send + 'static {
    /// The next records, waiting while the shard has none. Cancel-safe: the
    /// read position only moves when records are returned.
    fn next(&mut self) -> impl std::future::Future<Output = Result<Fetched, AwsError>> + Send;
}

/// How a fetcher paces itself.
#[derive(Clone, Debug)]
pub struct FetchSettings {
    /// Records per GetRecords call (`maxRecords`, at most 10,000).
    pub max_records: i32,
    /// Wait between calls when the shard has no new records
    /// (`idleTimeBetweenReadsInMillis`).
    pub idle_time_between_reads: Duration,
}

impl Default for FetchSettings {
    fn default() -> Self {
        Self { max_records: MAX_RECORDS_LIMIT, idle_time_between_reads: Duration::from_secs(1) }
    }
}

/// What one successful read gave.
#[derive(Debug)]
pub struct Fetched {
    /// In shard order, aggregates de-aggregated; empty at the shard's end,
    /// or when a read found no new records at the shard's tip.
    pub batch: Batch,
    /// Set when the shard is closed and fully read: its children.
    pub shard_end: Option<BTreeSet<String>>,
    /// The GetRecords calls made for this batch (none with enhanced fan-out).
    pub reads: Reads,
    /// When the read that gave this batch was sent (ms since the Unix
    /// epoch; with enhanced fan-out, when its event came): a batch at the
    /// shard's tip says no record that arrived before then is still unread,
    /// which is what closes a window by the clock.
    pub read_at_ms: u64,
}

/// Reads one shard, in order, from a starting position.
pub struct Fetcher {
    client: Client,
    stream: String,
    shard: String,
    settings: FetchSettings,
    /// The shard's hash keys: user records of an aggregate outside them are
    /// dropped. `None` when the lease does not say.
    range: Option<kpl::HashRange>,
    /// Where to get a fresh iterator from: the start, then after the last record read.
    resume: StartingPosition,
    /// Until the first record arrives: what a checkpoint already covers.
    skip_through: Option<Position>,
    iterator: Option<String>,
    next_call: Instant,
    throttled: Backoff,
    failed: Backoff,
    /// Records the next call asks for: `max_records`, halved after a call
    /// timed out, doubled back after each one that did not.
    limit: i32,
    /// When a silent call is asked again.
    hedge: Hedge,
}

impl Fetcher {
    /// A reader of `shard` of `stream` from `start`; `range` is the lease's hash key range.
    pub fn new(
        client: Client,
        stream: &str,
        shard: &str,
        start: StartingPosition,
        range: Option<kpl::HashRange>,
        settings: FetchSettings,
    ) -> Self {
        let skip_through = start.skip_through();
        Self {
            client,
            stream: stream.to_owned(),
            shard: shard.to_owned(),
            range,
            resume: start,
            skip_through,
            iterator: None,
            next_call: Instant::now(),
            throttled: Backoff::new(THROTTLED.0, THROTTLED.1),
            failed: Backoff::new(FAILED.0, FAILED.1),
            limit: settings.max_records,
            hedge: Hedge::new(GET_RECORDS_TIMEOUT),
            settings,
        }
    }

    /// The next records. A failed call is tried again in place — from the
    /// same iterator, or after the last record read — so nothing the
    /// processor was given is read again; only an error that waiting cannot
    /// mend (a deleted stream, denied access) is returned.
    async fn read(&mut self) -> Result<Fetched, AwsError> {
        let mut reads = Reads::default();
        loop {
            let iterator = match &self.iterator {
                Some(iterator) => iterator.clone(),
                None => match self.shard_iterator().await {
                    Ok(Some(iterator)) => iterator,
                    Ok(None) => return Ok(Fetched { batch: Batch::default(), shard_end: Some(BTreeSet::new()), reads, read_at_ms: unix_ms() }),
                    Err(e) if e.is_transient() => {
                        self.failed_call(&e);
                        tokio::time::sleep_until(self.next_call).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            tokio::time::sleep_until(self.next_call).await;
            self.next_call = Instant::now() + MIN_CALL_INTERVAL;
            reads.calls += 1;
            let read_at_ms = unix_ms();
            let (answer, asked) = self.get_records(&iterator).await;
            if asked.again > 0 {
                tracing::warn!(shard = %self.shard, "GetRecords went unanswered; asked again {} times on new connections", asked.again);
            }
            reads.calls += u64::from(asked.again);
            let output = match answer {
                Ok(output) => output,
                Err(e) if e.as_service_error().is_some_and(|s| s.is_expired_iterator_exception()) => {
                    reads.expired += 1;
                    self.iterator = None;
                    continue;
                }
                // Whether the stream is gone, the shard past retention, or neither
                // (local servers say so of a sequence number they cannot place):
                // a fresh iterator's answer tells (see `shard_iterator`).
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => {
                    tracing::warn!(shard = %self.shard, "GetRecords answered ResourceNotFoundException; asking for a fresh iterator");
                    self.iterator = None;
                    continue;
                }
                Err(e) if e.as_service_error().is_some_and(|s| s.is_provisioned_throughput_exceeded_exception()) => {
                    reads.throttles += 1;
                    let wait = self.throttled.next_wait();
                    tracing::warn!(shard = %self.shard, "GetRecords throttled; backing off {wait:?}");
                    self.next_call = Instant::now() + wait;
                    continue;
                }
                Err(e) => {
                    if matches!(e, SdkError::TimeoutError(_)) {
                        self.limit = (self.limit / 2).max(MIN_LIMIT);
                    }
                    let error = AwsError::from_sdk(Service::Kinesis, "GetRecords", &self.stream, e);
                    if !error.is_transient() {
                        return Err(error);
                    }
                    self.failed_call(&error);
                    continue;
                }
            };
            self.throttled.reset();
            self.failed.reset();
            self.limit = (self.limit.saturating_mul(2)).min(self.settings.max_records);
            let millis_behind_latest = output.millis_behind_latest().unwrap_or(0).max(0) as u64;
            let shard_end = output.next_shard_iterator.is_none().then(|| {
                output.child_shards.unwrap_or_default().into_iter().map(|c| c.shard_id).collect::<BTreeSet<_>>()
            });
            let mut batch = user_records(&self.shard, &output.records, self.range.as_ref(), &mut self.skip_through)?;
            batch.millis_behind_latest = millis_behind_latest;
            if let Some(last) = output.records.last() {
                self.resume = StartingPosition::After(last.sequence_number.clone());
            }
            self.iterator = output.next_shard_iterator;
            if batch.is_empty() && shard_end.is_none() {
                if millis_behind_latest > 0 {
                    continue;
                }
                // At the tip: said once per idle read, which is the clock of `--window`.
                self.next_call = Instant::now() + self.settings.idle_time_between_reads;
            }
            return Ok(Fetched { batch, shard_end, reads, read_at_ms });
        }
    }

    /// One GetRecords call: without the SDK's retries (this reader paces and
    /// retries itself), with time for a full 10 MB answer, and asked again
    /// beside it when it stays silent (see [`crate::hedge`]).
    async fn get_records(&mut self, iterator: &str) -> (Result<GetRecordsOutput, SdkError<GetRecordsError, HttpResponse>>, Asked) {
        let timeouts = TimeoutConfig::builder().operation_attempt_timeout(GET_RECORDS_TIMEOUT).operation_timeout(GET_RECORDS_TIMEOUT).build();
        let config = aws_sdk_kinesis::config::Builder::default().retry_config(RetryConfig::disabled()).timeout_config(timeouts);
        let request = self.client.get_records().shard_iterator(iterator).limit(self.limit);
        self.hedge.call(|| request.clone().customize().config_override(config.clone()).send()).await
    }

    /// A call failed with `error`, which waiting may mend: the next one
    /// waits a little (longer each time, up to a second).
    fn failed_call(&mut self, error: &AwsError) {
        let wait = self.failed.next_wait();
        tracing::warn!(shard = %self.shard, "reading the shard failed: {error}; trying again in place in {wait:?}");
        self.next_call = Instant::now() + wait;
    }

    /// A fresh iterator at the resume position; `None` when the shard is no
    /// longer in the stream (past retention), which ends it like `SHARD_END`.
    async fn shard_iterator(&mut self) -> Result<Option<String>, AwsError> {
        let request = self.client.get_shard_iterator().stream_name(&self.stream).shard_id(&self.shard);
        let request = match &self.resume {
            StartingPosition::TrimHorizon => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            StartingPosition::Latest => request.shard_iterator_type(ShardIteratorType::Latest),
            StartingPosition::AtTimestamp(ms) => {
                request.shard_iterator_type(ShardIteratorType::AtTimestamp).timestamp(DateTime::from_millis(*ms))
            }
            StartingPosition::At(sequence_number) => request
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .starting_sequence_number(sequence_number),
            StartingPosition::Checkpoint(position) => request
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .starting_sequence_number(position.sequence_number()),
            StartingPosition::After(sequence_number) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(sequence_number),
        };
        let output = match request.send().await {
            Ok(output) => output,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => {
                if !self.is_past_retention().await? {
                    return Err(self.not_found_while_listed("GetShardIterator"));
                }
                tracing::warn!(shard = %self.shard, "the shard is no longer in the stream (past retention): ending it as if at SHARD_END");
                return Ok(None);
            }
            Err(e) => return Err(AwsError::from_sdk(Service::Kinesis, "GetShardIterator", &self.stream, e)),
        };
        let iterator = output.shard_iterator.ok_or_else(|| AwsError::Service {
            operation: "GetShardIterator",
            code: "NoIterator".into(),
            message: format!("no iterator returned for {}", self.shard),
        })?;
        self.iterator = Some(iterator.clone());
        Ok(Some(iterator))
    }

    /// A ResourceNotFoundException for a shard the stream still lists: not
    /// a deleted stream (which stops the worker) but an answer to try again,
    /// as any failed read is. Local servers give it for a sequence number
    /// they cannot place.
    fn not_found_while_listed(&self, operation: &'static str) -> AwsError {
        AwsError::Service {
            operation,
            code: "ResourceNotFoundException".into(),
            message: format!("stream `{}` exists and lists shard {}; reading it again", self.stream, self.shard),
        }
    }

    /// Whether the stream exists but no longer lists this shard. (A missing
    /// stream is an error, never a reason to end shards.)
    async fn is_past_retention(&self) -> Result<bool, AwsError> {
        let shards = crate::stream::list_shards(&self.client, &self.stream).await?;
        Ok(!shards.iter().any(|s| s.id == self.shard))
    }
}

/// How far `start` is behind the shard's tip: one GetRecords of one record.
/// `None` for a shard no longer in the stream.
pub async fn millis_behind(client: &Client, stream: &str, shard: &str, start: StartingPosition) -> Result<Option<u64>, AwsError> {
    let settings = FetchSettings { max_records: 1, ..FetchSettings::default() };
    let mut fetcher = Fetcher::new(client.clone(), stream, shard, start, None, settings);
    let Some(iterator) = fetcher.shard_iterator().await? else { return Ok(None) };
    let output = client
        .get_records()
        .shard_iterator(iterator)
        .limit(1)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(Service::Kinesis, "GetRecords", stream, e))?;
    Ok(Some(output.millis_behind_latest().unwrap_or(0).max(0) as u64))
}

impl ShardReader for Fetcher {
    async fn next(&mut self) -> Result<Fetched, AwsError> {
        self.read().await
    }
}
