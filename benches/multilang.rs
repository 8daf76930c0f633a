//! The Python json-aggregate example (examples/python/json-aggregate/app.py)
//! draining one backlog two ways, on the same local servers:
//! - `kcl-host`: `kcl-host run` (release) of py-json-aggregate.wasm;
//! - `kclpy`: Java KCL 2.7.2's MultiLangDaemon running the same app.py
//!   through amazon-kclpy 3.2.0 (benches/kclpy: a CPython process per shard,
//!   records as base64 JSON lines over its stdin).
//!
//! 20,000 events of ~1 KiB on 4 shards, written before the consumer starts,
//! read 500 at a time by both (`maxRecords`), so a shard is 10 batches.
//! Drained is judged from the lease table: every shard's checkpoint at its
//! last record. Each run's line gives start → drained, first checkpoint →
//! drained, and the CPU-seconds and resident memory of the consumer's
//! processes (the JVM and its CPython children; kcl-host alone) at drained.
//!
//! Run with `bash scripts/servers.sh start && source .servers/env &&
//! bash benches/kclpy/setup.sh && cargo bench -p kcl-host --bench multilang
//! [-- kcl-host|kclpy]`; figures go in docs/BENCHMARKS.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kcl_host::lease::Checkpoint;
use kcl_testkit::process::{KclHost, Usage};
use kcl_testkit::{clients, leases, unique, TestStream};
use tokio::time::Instant;

const SHARDS: i32 = 4;
const RECORDS: usize = 20_000;
const LIMIT: Duration = Duration::from_secs(600);
/// Records per GetRecords call, and so per batch, for both consumers.
const MAX_RECORDS: &str = "500";

/// A stream holding the backlog, and each shard's last sequence number.
async fn backlog() -> (TestStream, BTreeMap<String, String>) {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-multilang"), SHARDS).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let kinds = ["purchase", "view"];
    let events: Vec<String> = (0..RECORDS)
        .map(|i| {
            let (user, kind, amount) = (format!("u{}", i % 50), kinds[i % 2], (i % 1000) as f64 / 10.0);
            format!(r#"{{"user":"{user}","kind":"{kind}","amount":{amount},"pad":"{}"}}"#, "x".repeat(900))
        })
        .collect();
    let records: Vec<(&str, &[u8], &str)> =
        events.iter().enumerate().map(|(i, e)| (shards[i % shards.len()].as_str(), e.as_bytes(), shards[i % shards.len()].as_str())).collect();
    let sequence_numbers = stream.put_to(&records).await;
    let last = records.iter().zip(sequence_numbers).map(|((shard, _, _), seq)| (shard.to_string(), seq)).collect();
    (stream, last)
}

/// The checkpoints in `application`'s lease table (none before the table exists).
async fn checkpoints(application: &str) -> Vec<(String, Checkpoint)> {
    let dynamodb = clients().await.dynamodb;
    if dynamodb.describe_table().table_name(application).send().await.is_err() {
        return Vec::new();
    }
    leases(&dynamodb, application).await.into_iter().map(|l| (l.key.shard_id().to_owned(), l.checkpoint)).collect()
}

/// Waits for `consumer` to drain the backlog into `application`'s table and prints its line.
async fn drain(name: &str, mut consumer: KclHost, application: &str, last: &BTreeMap<String, String>) {
    let started = Instant::now();
    let poll = Duration::from_millis(100);
    let mut first = None;
    loop {
        let checkpoints = checkpoints(application).await;
        let at = |shard: &str, position: &Checkpoint| matches!(position, Checkpoint::At(p) if last.get(shard).is_some_and(|s| s == p.sequence_number()));
        if checkpoints.iter().filter(|(shard, position)| at(shard, position)).count() == last.len() {
            break;
        }
        if first.is_none() && checkpoints.iter().any(|(_, position)| matches!(position, Checkpoint::At(_))) {
            first = Some(Instant::now());
        }
        if consumer.exited() || started.elapsed() > LIMIT {
            panic!("{name}: stopped, or not drained within {LIMIT:?}; log:\n{}", consumer.log().await.join("\n"));
        }
        tokio::time::sleep(poll).await;
    }
    let drained = Instant::now();
    let first = first.unwrap_or(drained);
    let Usage { cpu_seconds, rss_mib } = consumer.tree_usage();
    println!(
        "{name}: start -> drained {:.1} s; first checkpoint -> drained {:.1} s; {cpu_seconds:.1} CPU-seconds; {rss_mib:.0} MiB resident",
        (drained - started).as_secs_f64(),
        (drained - first).as_secs_f64()
    );
    consumer.kill().await;
}

async fn kcl_host() {
    let (stream, last) = backlog().await;
    let processor = kcl_testkit::guest("py-json-aggregate").display().to_string();
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    let application = unique("bench-multilang-host");
    let args = ["run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", &cache, "--max-records", MAX_RECORDS];
    let host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    drain("kcl-host", host, &application, &last).await;
}

/// The MultiLangDaemon's properties for `stream` and `application`, the
/// local servers' endpoints from the environment.
fn properties(app: &Path, stream: &str, application: &str) -> String {
    let endpoint = |service: &str| std::env::var(format!("AWS_ENDPOINT_URL_{service}")).expect("source .servers/env first");
    format!(
        "executableName = python3 {}\nstreamName = {stream}\napplicationName = {application}\n\
         AwsCredentialsProvider = DefaultCredentialsProvider\nprocessingLanguage = python/3\n\
         initialPositionInStream = TRIM_HORIZON\nregionName = us-east-1\nmetricsLevel = NONE\n\
         maxRecords = {MAX_RECORDS}\nkinesisEndpoint = {}\ndynamoDBEndpoint = {}\n",
        app.display(),
        endpoint("KINESIS"),
        endpoint("DYNAMODB")
    )
}

async fn kclpy() {
    let benches = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../benches");
    let java = benches.join("java-kcl/target");
    let kclpy = benches.join("kclpy/target/amazon_kclpy-3.2.0");
    let (Ok(classpath), true) = (std::fs::read_to_string(java.join("classpath.txt")), kclpy.is_dir()) else {
        println!("kclpy: not set up (run benches/kclpy/setup.sh)");
        return;
    };
    let (stream, last) = backlog().await;
    let application = unique("bench-multilang-kclpy");
    let file = std::env::temp_dir().join(format!("{application}.properties"));
    std::fs::write(&file, properties(&benches.join("kclpy/json_aggregate.py"), &stream.name, &application)).unwrap();
    let classpath = format!("{}:{}", java.join("classes").display(), classpath.trim());
    let args = ["-cp", &classpath, "software.amazon.kinesis.multilang.MultiLangDaemon", "--properties-file", &file.display().to_string()];
    let daemon = KclHost::spawn_with_env("java".as_ref(), &args, &[("PYTHONPATH", &kclpy.display().to_string())]);
    drain("kclpy (MultiLangDaemon 2.7.2)", daemon, &application, &last).await;
}

/// `cargo bench --bench multilang [-- kcl-host|kclpy]`: both, or one.
#[tokio::main]
async fn main() {
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    if wanted("kclpy") {
        kclpy().await;
    }
    if wanted("kcl-host") {
        kcl_host().await;
    }
}
