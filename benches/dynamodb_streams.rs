//! DynamoDB Streams through one `kcl-host run` (the counter guest, which
//! logs each record) against moto (`scripts/servers.sh start --kcl3`):
//! - `throughput`: 4,000 changes put before the worker starts (BatchWriteItem,
//!   25 a call) → changes per second from its first record to the lease's
//!   checkpoint at the last change (the lease table polled every 50 ms: the
//!   counter logs more lines a second than a guest may);
//! - `latency`: a caught-up worker, then 60 items put one at a time every
//!   250 ms → the time from each put's answer to its record's log line
//!   (median, p95, most).
//!
//! Run with `bash scripts/servers.sh start --kcl3 && source .servers/env &&
//! cargo bench -p kcl-host --bench dynamodb_streams [-- PART...]`; figures go
//! in docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use kcl_testkit::process::{log_seconds, parse_delivered, KclHost};
use kcl_testkit::tables::table_with_stream;
use kcl_testkit::{java_kcl3, unique};

const LIMIT: Duration = Duration::from_secs(600);

fn item(pk: &str, sk: usize, marker: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), AttributeValue::S(pk.to_owned())),
        ("sk".to_owned(), AttributeValue::N(sk.to_string())),
        ("marker".to_owned(), AttributeValue::S(marker.to_owned())),
    ])
}

/// The sequence number of the last change of the (one-shard) stream `arn`.
async fn last_sequence_number(aws: &kcl_host::aws::AwsClients, arn: &str) -> String {
    let streams = &aws.dynamodb_streams;
    let described = streams.describe_stream().stream_arn(arn).send().await.expect("DescribeStream");
    let shard = described.stream_description().unwrap().shards()[0].shard_id().unwrap().to_owned();
    let start = streams.get_shard_iterator().stream_arn(arn).shard_id(shard).shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon);
    let mut iterator = start.send().await.expect("GetShardIterator").shard_iterator;
    let mut last = None;
    while let Some(it) = iterator {
        let page = streams.get_records().shard_iterator(it).send().await.expect("GetRecords");
        if page.records().is_empty() {
            break;
        }
        last = page.records().last().and_then(|r| r.dynamodb()?.sequence_number().map(str::to_owned));
        iterator = page.next_shard_iterator;
    }
    last.expect("the stream has changes")
}

/// `kcl-host run` of the counter on the stream `arn`, leases on moto too; and its application.
fn start(arn: &str) -> (KclHost, String) {
    let processor = kcl_testkit::guest("counter").display().to_string();
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    let application = unique("bench-cdc-app");
    let args = ["run", &processor, "--stream", arn, "--application", &application, "--cache-dir", &cache, "--idle-time-between-reads", "200ms"];
    let endpoint = java_kcl3::dynamodb_endpoint();
    (KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, &[("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())]), application)
}

/// Seconds since midnight UTC, now (as [`log_seconds`] reads a log line).
fn now_seconds() -> f64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    since_epoch % 86_400.0
}

async fn throughput() {
    const CHANGES: usize = 4_000;
    let aws = java_kcl3::clients().await;
    let table = unique("bench-cdc");
    let arn = table_with_stream(&aws.dynamodb, &table).await;
    let items: Vec<WriteRequest> = (0..CHANGES)
        .map(|i| WriteRequest::builder().put_request(PutRequest::builder().set_item(Some(item(&format!("account-{}", i % 50), i, "backlog"))).build().unwrap()).build())
        .collect();
    for chunk in items.chunks(25) {
        aws.dynamodb.batch_write_item().request_items(&table, chunk.to_vec()).send().await.expect("BatchWriteItem");
    }
    let last = last_sequence_number(&aws, &arn).await;
    let (mut host, application) = start(&arn);
    host.wait_for("the lease table made", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;
    let started = tokio::time::Instant::now();
    let done = loop {
        let leases = kcl_testkit::leases(&aws.dynamodb, &application).await;
        if leases.iter().any(|l| l.checkpoint.position().is_some_and(|p| p.sequence_number() == last)) {
            break now_seconds();
        }
        assert!(started.elapsed() < LIMIT, "the lease never reached {last}: {leases:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (_, log) = host.interrupt().await;
    let first = log.iter().find(|l| parse_delivered(l).is_some()).map(|l| log_seconds(l)).expect("a record delivered");
    let took = done - first;
    println!("throughput: {CHANGES} changes (1 shard, moto) processed in {took:.2} s from the first record to the checkpoint at the last: {:.0} changes/s", CHANGES as f64 / took);
}

async fn latency() {
    const PUTS: usize = 60;
    let aws = java_kcl3::clients().await;
    let table = unique("bench-cdc");
    let arn = table_with_stream(&aws.dynamodb, &table).await;
    aws.dynamodb.put_item().table_name(&table).set_item(Some(item("warm", 0, "warm-up"))).send().await.expect("PutItem");
    let (mut host, _) = start(&arn);
    host.wait_for("the warm-up change", LIMIT, |log| log.iter().any(|l| l.contains("warm-up"))).await;
    let mut written = Vec::with_capacity(PUTS);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    for i in 0..PUTS {
        tick.tick().await;
        aws.dynamodb.put_item().table_name(&table).set_item(Some(item("account-1", i + 1, &format!("m-{i:03}")))).send().await.expect("PutItem");
        written.push(now_seconds());
    }
    host.wait_for("every put", LIMIT, |log| log.iter().any(|l| l.contains(&format!("m-{:03}", PUTS - 1)))).await;
    let (_, log) = host.interrupt().await;
    let mut latencies: Vec<f64> = (0..PUTS)
        .map(|i| {
            let marker = format!("\"m-{i:03}\"");
            let line = log.iter().find(|l| parse_delivered(l).is_some() && l.contains(&marker)).expect("each put delivered");
            (log_seconds(line) - written[i]) * 1000.0
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!("latency: a change's put answered → its record delivered, {PUTS} puts 250 ms apart (1 shard, moto, --idle-time-between-reads 200ms): median {:.0} ms, p95 {:.0} ms, most {:.0} ms", at(0.5), at(0.95), at(1.0));
}

#[tokio::main]
async fn main() {
    let parts: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    if wanted("throughput") {
        throughput().await;
    }
    if wanted("latency") {
        latency().await;
    }
}
