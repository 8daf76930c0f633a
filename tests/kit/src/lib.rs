//! Helpers for kcl-host's integration tests and demo, against the local
//! servers `scripts/servers.sh start` runs (endpoints from `AWS_ENDPOINT_URL_*`).

pub mod browser;
pub mod faults;
pub mod http_sink;
pub mod iam;
pub mod java_kcl3;
pub mod process;
pub mod producer;
pub mod tables;

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use kcl_host::aws::{AwsClients, AwsSettings};
use kcl_host::lease::dynamo::DynamoStore;
use kcl_host::lease::{Lease, LeaseStore};
use kcl_host::shard::{self, Shard};

/// A guest component built by `scripts/build-guests.sh`, by name
/// (`counter`, `go-json-aggregate`, ...).
pub fn guest(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/build").join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run scripts/build-guests.sh first", path.display());
    path
}

/// The compile cache tests and benchmarks share (not the user's): a debug
/// build takes seconds to compile a Go component, so each compiles once.
pub fn test_cache_dir() -> PathBuf {
    std::env::temp_dir().join("kcl-host-test-cache")
}

/// A name no other test run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{:08x}", std::process::id(), fastrand::u32(..))
}

/// Clients for the local servers; panics with the fix when they are not running.
pub async fn clients() -> AwsClients {
    for var in ["AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB"] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set: start the local servers with `scripts/servers.sh start` and `source .servers/env`"
        );
    }
    AwsClients::from_env(&AwsSettings::default()).await.expect("clients for the local servers")
}

/// One record as [`TestStream::read_all`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecord {
    pub shard: String,
    pub sequence_number: String,
    pub partition_key: String,
    pub data: String,
}

/// Whether sequence number `a` comes before or is `b` (numbers as decimal strings).
pub fn at_or_before(a: &str, b: &str) -> bool {
    (a.len(), a) <= (b.len(), b)
}

/// A stream on the local Kinesis server.
pub struct TestStream {
    pub name: String,
    pub kinesis: aws_sdk_kinesis::Client,
}

impl TestStream {
    /// Creates a stream of `shards` shards and waits until it is active.
    pub async fn create(kinesis: &aws_sdk_kinesis::Client, name: &str, shards: i32) -> Self {
        match kinesis.create_stream().stream_name(name).shard_count(shards).send().await {
            // The name is the test's own: "in use" means an attempt that
            // timed out on a busy server created it before the retry.
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_in_use_exception()) => {}
            result => {
                result.expect("CreateStream");
            }
        }
        let stream = Self { name: name.to_owned(), kinesis: kinesis.clone() };
        stream.wait_active().await;
        stream
    }

    /// Waits until the stream accepts changes again: polls its status every
    /// 50 ms (the SDK's `wait_until_stream_exists` sleeps 10 s before a
    /// second look, and kinesis-local is ACTIVE within one).
    pub async fn wait_active(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let described = self.kinesis.describe_stream_summary().stream_name(&self.name).send().await;
            let status = described.as_ref().ok().and_then(|d| d.stream_description_summary.as_ref()).map(|s| s.stream_status.clone());
            if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "stream {} never became ACTIVE: {status:?} ({:?})", self.name, described.err());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn shards(&self) -> Vec<Shard> {
        shard::list_shards(&self.kinesis, &self.name).await.expect("ListShards")
    }

    /// Writes `payloads` to one shard, in order, returning their sequence
    /// numbers. Each payload is its own partition key.
    pub async fn put(&self, shard_id: &str, payloads: &[String]) -> Vec<String> {
        let records: Vec<(&[u8], &str)> = payloads.iter().map(|p| (p.as_bytes(), p.as_str())).collect();
        self.put_keyed(shard_id, &records).await
    }

    /// Writes `(data, partition key)` records to one shard, in order,
    /// returning their sequence numbers.
    pub async fn put_keyed(&self, shard_id: &str, records: &[(&[u8], &str)]) -> Vec<String> {
        let records: Vec<(&str, &[u8], &str)> = records.iter().map(|(data, key)| (shard_id, *data, *key)).collect();
        self.put_to(&records).await
    }

    /// Writes `(shard, data, partition key)` records, each to its shard (by
    /// explicit hash key), in order, returning their sequence numbers.
    pub async fn put_to(&self, records: &[(&str, &[u8], &str)]) -> Vec<String> {
        let shards = self.shards().await;
        let hash_key = |id: &str| {
            let shard = shards.iter().find(|s| s.id == id).unwrap_or_else(|| panic!("no shard {id}"));
            shard.starting_hash_key.clone()
        };
        let mut sequence_numbers = Vec::new();
        for chunk in records.chunks(500) {
            let entries = chunk.iter().map(|(shard_id, data, key)| {
                PutRecordsRequestEntry::builder()
                    .data(Blob::new(*data))
                    .partition_key(*key)
                    .explicit_hash_key(hash_key(shard_id))
                    .build()
                    .expect("complete entry")
            });
            let out = self.kinesis.put_records().stream_name(&self.name).set_records(Some(entries.collect())).send().await.expect("PutRecords");
            assert_eq!(out.failed_record_count().unwrap_or(0), 0, "every record written");
            for ((shard_id, _, _), result) in chunk.iter().zip(out.records()) {
                assert_eq!(result.shard_id(), Some(*shard_id), "records land on the shard asked for");
                sequence_numbers.push(result.sequence_number().expect("sequence number").to_owned());
            }
        }
        sequence_numbers
    }

    /// Writes `(data, partition key)` records where Kinesis places them
    /// (by the MD5 of the key), in order, returning their sequence numbers.
    pub async fn put_by_key(&self, records: &[(&[u8], &str)]) -> Vec<String> {
        let mut sequence_numbers = Vec::new();
        for chunk in records.chunks(500) {
            let entries = chunk.iter().map(|(data, key)| {
                PutRecordsRequestEntry::builder().data(Blob::new(*data)).partition_key(*key).build().expect("complete entry")
            });
            let out = self.kinesis.put_records().stream_name(&self.name).set_records(Some(entries.collect())).send().await.expect("PutRecords");
            assert_eq!(out.failed_record_count().unwrap_or(0), 0, "every record written");
            sequence_numbers.extend(out.records().iter().map(|r| r.sequence_number().expect("sequence number").to_owned()));
        }
        sequence_numbers
    }

    /// Every record of the stream, read from the oldest: (shard, sequence
    /// number, partition key, data), each shard in order.
    pub async fn read_all(&self) -> Vec<StreamRecord> {
        self.read_all_arrivals().await.into_iter().map(|(record, _)| record).collect()
    }

    /// [`Self::read_all`], each record with its approximate arrival
    /// timestamp (milliseconds since the Unix epoch).
    pub async fn read_all_arrivals(&self) -> Vec<(StreamRecord, i64)> {
        use aws_sdk_kinesis::types::ShardIteratorType;
        let mut all = Vec::new();
        for shard in self.shards().await {
            let mut iterator = self
                .kinesis
                .get_shard_iterator()
                .stream_name(&self.name)
                .shard_id(&shard.id)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("GetShardIterator")
                .shard_iterator;
            while let Some(it) = iterator {
                let page = self.kinesis.get_records().shard_iterator(it).limit(10_000).send().await.expect("GetRecords");
                for r in page.records() {
                    let record = StreamRecord {
                        shard: shard.id.clone(),
                        sequence_number: r.sequence_number().to_owned(),
                        partition_key: r.partition_key().unwrap_or_default().to_owned(),
                        data: String::from_utf8_lossy(r.data().as_ref()).into_owned(),
                    };
                    let arrival = r.approximate_arrival_timestamp().and_then(|t| t.to_millis().ok()).unwrap_or_default();
                    all.push((record, arrival));
                }
                if page.records().is_empty() && page.millis_behind_latest().unwrap_or(0) == 0 {
                    break;
                }
                iterator = page.next_shard_iterator;
            }
        }
        all
    }

    /// Splits a shard at the middle of its hash range; returns the children's ids.
    pub async fn split(&self, shard_id: &str) -> Vec<String> {
        let before: Vec<String> = self.shards().await.into_iter().map(|s| s.id).collect();
        let shard = self.shards().await.into_iter().find(|s| s.id == shard_id).expect("shard to split");
        let (start, end): (u128, u128) = (shard.starting_hash_key.parse().unwrap(), shard.ending_hash_key.parse().unwrap());
        let middle = start + (end - start) / 2 + 1;
        self.kinesis
            .split_shard()
            .stream_name(&self.name)
            .shard_to_split(shard_id)
            .new_starting_hash_key(middle.to_string())
            .send()
            .await
            .expect("SplitShard");
        self.wait_active().await;
        self.new_shards(&before).await
    }

    /// Merges two adjacent shards; returns the child's id.
    pub async fn merge(&self, shard_id: &str, adjacent: &str) -> String {
        let before: Vec<String> = self.shards().await.into_iter().map(|s| s.id).collect();
        self.kinesis
            .merge_shards()
            .stream_name(&self.name)
            .shard_to_merge(shard_id)
            .adjacent_shard_to_merge(adjacent)
            .send()
            .await
            .expect("MergeShards");
        self.wait_active().await;
        self.new_shards(&before).await.pop().expect("a merged shard")
    }

    async fn new_shards(&self, before: &[String]) -> Vec<String> {
        self.shards().await.into_iter().map(|s| s.id).filter(|id| !before.contains(id)).collect()
    }
}

/// Creates an application's lease table holding `rows`, as another worker
/// (or an earlier run) would have left it.
pub async fn write_leases(dynamodb: &aws_sdk_dynamodb::Client, table: &str, rows: &[Lease]) {
    let store = DynamoStore::new(dynamodb.clone(), table);
    store.ensure_table().await.expect("creating the lease table");
    for row in rows {
        assert!(store.create(row).await.expect("writing a lease"), "{} already exists", row.key);
    }
}

/// Every lease in an application's table.
pub async fn leases(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Vec<Lease> {
    DynamoStore::new(dynamodb.clone(), table).list().await.expect("reading the lease table")
}

/// Creates an on-demand table keyed by `keys`: the hash key, then the
/// range key if there is one (each a name and its type).
pub async fn create_table(dynamodb: &aws_sdk_dynamodb::Client, table: &str, keys: &[(&str, aws_sdk_dynamodb::types::ScalarAttributeType)]) {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType};
    let mut create = dynamodb.create_table().table_name(table).billing_mode(BillingMode::PayPerRequest);
    for ((name, kind), role) in keys.iter().zip([KeyType::Hash, KeyType::Range]) {
        create = create
            .attribute_definitions(AttributeDefinition::builder().attribute_name(*name).attribute_type(kind.clone()).build().expect("complete"))
            .key_schema(KeySchemaElement::builder().attribute_name(*name).key_type(role).build().expect("complete"));
    }
    create.send().await.expect("CreateTable");
}
