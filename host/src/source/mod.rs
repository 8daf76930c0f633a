//! Where records come from: the one seam between the sources and the rest
//! of the host. A source lists a stream's shards with their parents, opens
//! a reader of one shard at a position, and tells how far a position is
//! behind; positions are sequence numbers and records are
//! [`crate::records::Batch`] rows for every source. The shard loop, the
//! leases, the failure policy, state and swaps never ask which source they
//! read.
//!
//! - Kinesis: [`crate::stream`] lists shards, [`crate::fetch`] reads them
//!   with GetRecords and [`crate::fanout`] with enhanced fan-out.
//! - DynamoDB Streams: [`dynamodb`] (a table's change stream).

pub mod dynamodb;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::aws::{AwsClients, AwsError};
use crate::config::Retrieval;
use crate::fanout::{self, KinesisSubscriptions, Subscriber};
use crate::fetch::{self, FetchSettings, Fetcher, Prefetch, StartingPosition};
use crate::records::kpl::HashRange;
use crate::stream::{AppStream, Shard, Streams};
use crate::stream::SourceKind;

/// Opens a shard's reader for each attempt: [`Sources`] in a worker, a
/// script in the unit tests.
pub trait OpenReader: Send + Sync {
    /// A reader of `shard` of `stream` from `start`; `range` is the lease's
    /// hash key range, for a KPL aggregate that spans a reshard.
    fn open(&self, stream: &str, shard: &str, start: StartingPosition, range: Option<HashRange>) -> Prefetch;
}

/// Every stream of an application with the clients that read it.
pub struct Sources {
    streams: Arc<Streams>,
    clients: AwsClients,
    fetch: FetchSettings,
    /// Each Kinesis stream's consumer, by stream name; empty when polling.
    fan_out: BTreeMap<String, KinesisSubscriptions>,
}

impl Sources {
    /// The readers of `streams`: polling at `fetch`, or through enhanced
    /// fan-out consumers named after `application` when `retrieval` says so.
    pub async fn connect(
        streams: Arc<Streams>,
        clients: &AwsClients,
        fetch: FetchSettings,
        retrieval: Retrieval,
        application: &str,
    ) -> Result<Self, AwsError> {
        let mut fan_out = BTreeMap::new();
        for stream in streams.iter().filter(|s| s.source == SourceKind::Kinesis) {
            if let Some(subscriptions) = fanout::subscriptions(retrieval, &clients.kinesis, &stream.name, application).await? {
                fan_out.insert(stream.name.clone(), subscriptions);
            }
        }
        Ok(Self { streams, clients: clients.clone(), fetch, fan_out })
    }
}

/// Every shard of `stream`, with its parents.
pub async fn list_shards(clients: &AwsClients, stream: &AppStream) -> Result<Vec<Shard>, AwsError> {
    match &stream.source {
        SourceKind::Kinesis => crate::stream::list_shards(&clients.kinesis, &stream.name).await,
        SourceKind::DynamoDb(facts) => dynamodb::list_shards(&clients.dynamodb_streams, &facts.arn).await,
    }
}

/// How far `start` is behind the tip of `shard` of `stream` (a Kinesis
/// stream's name, or a DynamoDB stream's ARN); `None` for a shard no longer
/// in the stream.
pub async fn millis_behind(clients: &AwsClients, stream: &str, shard: &str, start: StartingPosition) -> Result<Option<u64>, AwsError> {
    if dynamodb::is_stream_arn(stream) {
        // The partition key only routes records: a lag reading needs none.
        dynamodb::reader::millis_behind(&clients.dynamodb_streams, stream, "", shard, start).await
    } else {
        fetch::millis_behind(&clients.kinesis, stream, shard, start).await
    }
}

impl OpenReader for Sources {
    fn open(&self, stream: &str, shard: &str, start: StartingPosition, range: Option<HashRange>) -> Prefetch {
        let source = self.streams.iter().find(|s| s.name == stream).map_or(&SourceKind::Kinesis, |s| &s.source);
        match (source, self.fan_out.get(stream)) {
            (SourceKind::DynamoDb(facts), _) => fetch::prefetch(dynamodb::reader::StreamReader::new(
                self.clients.dynamodb_streams.clone(),
                &facts.arn,
                &facts.hash_key,
                shard,
                start,
                self.fetch.max_records,
                self.fetch.idle_time_between_reads,
            )),
            (SourceKind::Kinesis, Some(subscriptions)) => fetch::prefetch(Subscriber::new(subscriptions.clone(), shard, start, range)),
            (SourceKind::Kinesis, None) => {
                fetch::prefetch(Fetcher::new(self.clients.kinesis.clone(), stream, shard, start, range, self.fetch.clone()))
            }
        }
    }
}
