//! The streams an application reads, resolved at start: each one's
//! identity (its account and creation time, which Java KCL's multi-stream
//! lease keys carry), where its new shards start, and which of them a lease
//! key names.
//!
//! The lease keys' format follows the table: a table of single-stream rows
//! (shard ids) stays so, a table of multi-stream rows
//! (`account:stream:creationEpoch:shardId`) stays so, and an empty table
//! gets multi-stream rows when the streams were given as a list. A table
//! holding both is refused, as is a list of streams over single-stream rows.

use std::sync::Arc;

use crate::aws::{AwsClients, AwsError, Service};
use crate::lease::coordinator::Scope;
use crate::lease::{Lease, LeaseKey, StreamIdentifier};
use crate::shard::InitialPosition;
use crate::source::dynamodb::{self, Images, StreamFacts};

/// One stream an application reads, as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    /// The Kinesis stream's name, the DynamoDB stream's ARN, or the table's name.
    pub name: String,
    /// Where its shards without a checkpoint start.
    pub initial_position: InitialPosition,
    /// What `name` names.
    pub kind: StreamKind,
}

/// What a configured stream's name names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StreamKind {
    /// A Kinesis data stream (by name; an ARN was cut to its name).
    Kinesis,
    /// A DynamoDB stream, by its ARN.
    DynamoDbStream,
    /// A DynamoDB table, whose current stream is read (`--dynamodb-table`).
    DynamoDbTable,
}

/// A configured stream, as its service describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct AppStream {
    /// The Kinesis stream's name, or the DynamoDB stream's ARN.
    pub name: String,
    /// Where its shards without a checkpoint start.
    pub initial_position: InitialPosition,
    /// Its account, name and creation time.
    pub identifier: StreamIdentifier,
    /// Which service it is read from.
    pub source: SourceKind,
}

/// Which service a stream is read from.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceKind {
    /// A Kinesis data stream.
    Kinesis,
    /// A DynamoDB table's stream, as DescribeStream told it at start.
    DynamoDb(Arc<StreamFacts>),
}

impl SourceKind {
    /// The source's name in `status`, on the dashboard and in `/metrics`.
    pub fn label(&self) -> &'static str {
        match self {
            SourceKind::Kinesis => "kinesis",
            SourceKind::DynamoDb(_) => "dynamodb-streams",
        }
    }
}

/// The streams of an application and the format of its lease keys.
#[derive(Debug)]
pub struct Streams {
    streams: Vec<AppStream>,
    /// Lease keys name the stream (`account:stream:creationEpoch:shardId`).
    multi: bool,
}

/// The stream identifier the DynamoDB Streams Kinesis Adapter (2.x) gives
/// the stream `arn`: `region$account$table$label` (the label's colons as
/// `_`), created at epoch 1. A table of shard-id rows keeps its shard ids
/// (the adapter's single-stream keys); a table of multi-stream rows gets the
/// adapter's multi-stream keys, `account:region$account$table$label:1:shardId`.
fn adapter_identifier(arn: &str) -> StreamIdentifier {
    // arn:<partition>:dynamodb:<region>:<account>:table/<table>/stream/<label>
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let (region, account, resource) = (parts.get(3).copied().unwrap_or_default(), parts.get(4).copied().unwrap_or_default(), parts.get(5).copied().unwrap_or_default());
    let (table, label) = resource.strip_prefix("table/").and_then(|r| r.split_once("/stream/")).unwrap_or_default();
    let name = [region, account, table, &label.replace(':', "_")].join("$");
    StreamIdentifier { account: account.to_owned(), name, creation_epoch: 1 }
}

/// The key of the first row in `leases` that `matches`, to name it in an error.
fn example(leases: &[Lease], matches: impl Fn(&Lease) -> bool) -> Option<&str> {
    leases.iter().find(|lease| matches(lease)).map(|lease| lease.key.as_str())
}

impl Streams {
    /// Describes each stream (which also checks that it exists: a typo must
    /// not create a table). `listed`: the streams were given as a list, so
    /// an empty table gets multi-stream keys even for one stream.
    pub async fn describe(clients: &AwsClients, specs: &[StreamSpec], listed: bool) -> Result<Self, AwsError> {
        let mut streams = Vec::with_capacity(specs.len());
        for spec in specs {
            let arn = match spec.kind {
                StreamKind::Kinesis => None,
                StreamKind::DynamoDbStream => Some(spec.name.clone()),
                StreamKind::DynamoDbTable => Some(dynamodb::table_stream(&clients.dynamodb_streams, &spec.name).await?),
            };
            if let Some(arn) = arn {
                streams.push(Self::dynamodb_stream(clients, spec, &arn).await?);
                continue;
            }
            let summary = clients
                .kinesis
                .describe_stream_summary()
                .stream_name(&spec.name)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk(Service::Kinesis, "DescribeStreamSummary", &spec.name, e))?
                .stream_description_summary
                .ok_or_else(|| AwsError::Service {
                    operation: "DescribeStreamSummary",
                    code: "NoSummary".into(),
                    message: format!("no description of stream `{}`", spec.name),
                })?;
            // arn:<partition>:kinesis:<region>:<account>:stream/<name>
            let account = summary.stream_arn.split(':').nth(4).unwrap_or_default().to_owned();
            let created = summary.stream_creation_timestamp.secs().max(0) as u64;
            streams.push(AppStream {
                name: spec.name.clone(),
                initial_position: spec.initial_position.clone(),
                identifier: StreamIdentifier { account, name: spec.name.clone(), creation_epoch: created },
                source: SourceKind::Kinesis,
            });
        }
        Ok(Self { streams, multi: listed || specs.len() > 1 })
    }

    /// A DynamoDB stream, described (which checks that it exists). Its
    /// leases are keyed as the DynamoDB Streams Kinesis Adapter keys them.
    async fn dynamodb_stream(clients: &AwsClients, spec: &StreamSpec, arn: &str) -> Result<AppStream, AwsError> {
        let (facts, _) = dynamodb::describe(&clients.dynamodb_streams, arn).await?;
        tracing::info!(stream = arn, table = %facts.table, view = %facts.view_type, partition_key = %facts.hash_key, "reading a DynamoDB stream");
        Ok(AppStream {
            name: arn.to_owned(),
            initial_position: spec.initial_position.clone(),
            identifier: adapter_identifier(arn),
            source: SourceKind::DynamoDb(Arc::new(facts)),
        })
    }

    /// Refuses a DynamoDB stream that lacks the images the processor
    /// `needs`; the error says how to get a stream that has them.
    pub fn check_images(&self, needs: Option<Images>) -> Result<(), String> {
        let Some(needs) = needs else { return Ok(()) };
        self.streams.iter().try_for_each(|stream| match &stream.source {
            SourceKind::DynamoDb(facts) => facts.check_images(needs),
            SourceKind::Kinesis => Ok(()),
        })
    }

    /// Settles the lease keys' format on what `leases` (the table) holds;
    /// the error says what does not fit and what to do.
    pub fn fit_table(mut self, application: &str, leases: &[Lease]) -> Result<Self, String> {
        let single = example(leases, |lease| lease.key.stream_part().is_none());
        let multi = example(leases, |lease| lease.key.stream_part().is_some());
        match (single, multi) {
            (Some(single), Some(multi)) => Err(format!(
                "the lease table `{application}` holds both single-stream rows (like `{single}`) and multi-stream rows (like \
                 `{multi}`); an application's leases are of one kind: delete the rows of the kind this application does not use"
            )),
            (Some(single), None) if self.streams.len() > 1 => Err(format!(
                "the lease table `{application}` holds single-stream rows (like `{single}`), which name no stream, so it can \
                 serve one stream only; to read several streams, use a new --application (its table gets keys that name each \
                 stream), or read only the stream this table belongs to"
            )),
            (Some(_), None) => {
                self.multi = false;
                Ok(self)
            }
            (None, Some(_)) => {
                self.multi = true;
                Ok(self)
            }
            (None, None) => Ok(self),
        }
    }

    /// Every stream, in the order configured.
    pub fn iter(&self) -> impl Iterator<Item = &AppStream> {
        self.streams.iter()
    }

    /// Whether lease keys name their stream.
    pub fn is_multi(&self) -> bool {
        self.multi
    }

    /// The lease key of `shard_id` of `stream`.
    pub fn key(&self, stream: &AppStream, shard_id: &str) -> LeaseKey {
        if self.multi { LeaseKey::multi_stream(&stream.identifier, shard_id) } else { LeaseKey::shard(shard_id) }
    }

    /// The stream whose shard `key` leases; `None` for a stream this
    /// application does not read (any more).
    pub fn of(&self, key: &LeaseKey) -> Option<&AppStream> {
        match (self.multi, key.stream()) {
            (true, Some(identifier)) => self.streams.iter().find(|stream| stream.identifier == identifier),
            (false, None) => self.streams.first(),
            _ => None,
        }
    }

    /// The leases a worker of these streams considers: those of its streams.
    pub fn scope(self: &Arc<Self>) -> Scope {
        let streams = self.clone();
        Box::new(move |key| streams.of(key).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams(names: &[&str], multi: bool) -> Streams {
        let streams = names
            .iter()
            .map(|name| AppStream {
                name: name.to_string(),
                initial_position: InitialPosition::TrimHorizon,
                identifier: StreamIdentifier { account: "000000000000".into(), name: name.to_string(), creation_epoch: 1_700_000_000 },
                source: SourceKind::Kinesis,
            })
            .collect();
        Streams { streams, multi }
    }

    fn lease(key: &str) -> Lease {
        Lease::new(key, crate::lease::Checkpoint::TrimHorizon, Default::default())
    }

    #[test]
    fn a_multi_stream_key_names_its_stream_and_a_removed_stream_is_out_of_scope() {
        let both = Arc::new(streams(&["orders", "refunds"], true));
        let key = both.key(both.iter().nth(1).unwrap(), "shardId-000000000003");
        assert_eq!(key, "000000000000:refunds:1700000000:shardId-000000000003");
        assert_eq!(both.of(&key).map(|s| s.name.as_str()), Some("refunds"));
        let scope = both.scope();
        assert!(scope(&key));
        assert!(!scope(&LeaseKey::from("000000000000:gone:1700000000:shardId-000000000000")));
        // A stream made again under the same name is another stream.
        assert!(!scope(&LeaseKey::from("000000000000:orders:1800000000:shardId-000000000000")));
        assert!(!scope(&LeaseKey::shard("shardId-000000000000")));
    }

    #[test]
    fn a_dynamodb_streams_lease_key_is_the_adapters_in_either_format() {
        let arn = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-12-01T00:00:00.000";
        let identifier = adapter_identifier(arn);
        let stream = AppStream {
            name: arn.into(),
            initial_position: InitialPosition::TrimHorizon,
            identifier,
            source: SourceKind::Kinesis, // what the key depends on is the identifier
        };
        let shard = "shardId-00000001764547200000-0a1b2c3d";
        let single = Streams { streams: vec![stream.clone()], multi: false };
        assert_eq!(single.key(&stream, shard), shard);
        let multi = Streams { streams: vec![stream.clone()], multi: true };
        let key = multi.key(&stream, shard);
        assert_eq!(key, "123456789012:us-east-1$123456789012$orders$2026-12-01T00_00_00.000:1:shardId-00000001764547200000-0a1b2c3d");
        assert_eq!(multi.of(&key).map(|s| s.name.as_str()), Some(arn), "an adapter's multi-stream row is this stream's");
    }

    #[test]
    fn the_table_decides_the_key_format_and_a_mix_is_refused_with_the_fix() {
        let one = streams(&["orders"], true).fit_table("app", &[lease("shardId-000000000000")]).unwrap();
        assert!(!one.is_multi());
        assert_eq!(one.key(one.iter().next().unwrap(), "shardId-000000000001"), "shardId-000000000001");
        let java = streams(&["orders"], false).fit_table("app", &[lease("1:orders:2:shardId-000000000000")]).unwrap();
        assert!(java.is_multi());
        let two = streams(&["orders", "refunds"], true).fit_table("app", &[lease("shardId-000000000000")]).unwrap_err();
        assert!(two.contains("can serve one stream only") && two.contains("new --application"), "{two}");
        let mixed = streams(&["orders"], true).fit_table("app", &[lease("shardId-000000000000"), lease("1:orders:2:shardId-000000000000")]);
        assert!(mixed.unwrap_err().contains("both single-stream rows"));
        assert!(streams(&["orders"], true).fit_table("app", &[]).unwrap().is_multi());
    }
}
