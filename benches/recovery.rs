//! Leases and reads under faults, through the test kit's fault proxy in
//! front of the local servers, one `kcl-host run` (the counter guest, the
//! default failover time of 10 s) on 8 shards:
//! - `dynamodb`: a 20 s DynamoDB outage under a steady producer, every
//!   request a 500 and then every request unanswered (a black hole) →
//!   every shard processing again;
//! - `kinesis`: a 20 s Kinesis outage, every GetRecords a 500 and then
//!   unanswered, then a burst of 30 5xx and resets → every shard
//!   processing again, and how many records were delivered twice;
//! - `backlog`: 40,000 records of 1 KiB on 8 shards → drained, with the
//!   worker's CPU seconds and the records delivered twice; and GetRecords
//!   calls per shard-second, draining and then idle.
//!
//! Run with `bash scripts/servers.sh start && source .servers/env &&
//! cargo bench -p kcl-host --bench recovery [-- PART...]`; figures go in
//! docs/BENCHMARKS.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kcl_testkit::faults::{Fault, FaultProxy, Rule};
use kcl_testkit::process::KclHost;
use kcl_testkit::producer::Producer;
use kcl_testkit::{clients, unique, TestStream};

const SHARDS: i32 = 8;
const LIMIT: Duration = Duration::from_secs(300);
const OUTAGE: Duration = Duration::from_secs(20);

/// `kcl-host run` of the counter with its `service` endpoint through `proxy`.
fn start(proxy: &FaultProxy, service: &str, stream: &str) -> KclHost {
    let processor = kcl_testkit::guest("counter").display().to_string();
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    let application = unique("bench-recovery-app");
    let args = ["run", &processor, "--stream", stream, "--application", &application, "--cache-dir", &cache];
    let variable = format!("AWS_ENDPOINT_URL_{service}");
    KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, &[(variable.as_str(), proxy.endpoint.as_str())])
}

async fn proxy_for(service: &str) -> FaultProxy {
    FaultProxy::start(&std::env::var(format!("AWS_ENDPOINT_URL_{service}")).expect("the local servers' endpoints")).await
}

/// How many records the worker's `log` shows delivered more than once.
fn delivered_twice(log: &[String]) -> usize {
    let mut times: BTreeMap<String, usize> = BTreeMap::new();
    for d in log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)) {
        *times.entry(d.data).or_default() += 1;
    }
    times.values().filter(|n| **n > 1).count()
}

/// Starts the counter on `stream` through `proxy` and waits until every shard is processing.
async fn start_all(proxy: &FaultProxy, service: &str, stream: &TestStream) -> KclHost {
    let mut host = start(proxy, service, &stream.name);
    host.wait_for("every shard", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: initialize ")).count() >= SHARDS as usize).await;
    host
}

/// Puts a marker on every shard and returns the seconds until the worker
/// processed all of them, from `since`.
async fn markers_processed(host: &mut KclHost, stream: &TestStream, prefix: &str, since: Instant) -> f64 {
    let mut markers = Vec::new();
    for shard in stream.shards().await {
        let marker = format!("{prefix}-{}", shard.id);
        stream.put(&shard.id, std::slice::from_ref(&marker)).await;
        markers.push(marker);
    }
    host.wait_for("every shard processing", LIMIT, |log| {
        let seen: Vec<String> = log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).map(|d| d.data).collect();
        markers.iter().all(|m| seen.contains(m))
    })
    .await;
    since.elapsed().as_secs_f64()
}

/// An outage of `service` (`fault` for every request matching `operation`)
/// for [`OUTAGE`] under a steady producer: seconds from its end until every
/// shard processed a record put then, and the records delivered twice.
async fn outage(service: &str, operation: Option<&'static str>, fault: Fault) -> (f64, usize) {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-outage"), SHARDS).await;
    let proxy = proxy_for(service).await;
    let mut host = start_all(&proxy, service, &stream).await;
    let producer = Producer::start(&stream, "steady", Duration::from_millis(100)).await;
    markers_processed(&mut host, &stream, "before", Instant::now()).await;
    proxy.set(vec![Rule::every(operation, fault)]);
    tokio::time::sleep(OUTAGE).await;
    proxy.clear();
    let recovered = markers_processed(&mut host, &stream, "after", Instant::now()).await;
    producer.stop().await;
    let (_, log) = host.interrupt().await;
    let twice = delivered_twice(&log);
    (recovered, twice)
}

/// The two kinds of outage: every request answered with a 500, or none answered.
fn outages() -> [(&'static str, Fault); 2] {
    [("500s", Fault::Fail(500, "InternalFailure")), ("unanswered", Fault::BlackHole)]
}

async fn dynamodb() {
    for (kind, fault) in outages() {
        let (recovered, twice) = outage("DYNAMODB", None, fault).await;
        println!("DynamoDB outage of {OUTAGE:?} ({kind}), 8 shards: every shard processing again {recovered:.2} s after it ended; {twice} records delivered twice");
    }
}

async fn kinesis() {
    for (kind, fault) in outages() {
        let (recovered, twice) = outage("KINESIS", Some("GetRecords"), fault).await;
        println!("Kinesis outage of {OUTAGE:?} (GetRecords {kind}), 8 shards: every shard processing again {recovered:.2} s after it ended; {twice} records delivered twice");
    }
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-burst"), SHARDS).await;
    let proxy = proxy_for("KINESIS").await;
    let mut host = start_all(&proxy, "KINESIS", &stream).await;
    let producer = Producer::start(&stream, "steady", Duration::from_millis(100)).await;
    markers_processed(&mut host, &stream, "before", Instant::now()).await;
    proxy.set(vec![
        Rule { table: None, operation: Some("GetRecords"), body_contains: None, fault: Fault::Fail(500, "InternalFailure"), times: Some(20) },
        Rule { table: None, operation: Some("GetRecords"), body_contains: None, fault: Fault::Reset, times: Some(10) },
    ]);
    while proxy.counts().faulted < 30 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recovered = markers_processed(&mut host, &stream, "after", Instant::now()).await;
    producer.stop().await;
    let (_, log) = host.interrupt().await;
    let twice = delivered_twice(&log);
    println!("a burst of 30 failed GetRecords (20 500s, 10 resets), 8 shards: every shard processing again {recovered:.2} s after the last; {twice} records delivered twice");
}

/// GetRecords calls the proxy forwarded in `window`, per shard-second.
fn calls_per_shard_second(proxy: &FaultProxy, from: tokio::time::Instant, to: tokio::time::Instant) -> f64 {
    let calls = proxy.counts().requests.iter().filter(|r| r.operation == "GetRecords" && r.at >= from && r.at < to).count();
    calls as f64 / (SHARDS as f64 * (to - from).as_secs_f64())
}

/// 40,000 records of 1 KiB put on 8 shards before the worker starts.
async fn backlog_stream() -> (TestStream, usize) {
    const RECORDS: usize = 40_000;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-backlog"), SHARDS).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let data: Vec<String> = (0..RECORDS).map(|i| format!("{i:08}-{}", "x".repeat(1015))).collect();
    let records: Vec<(&str, &[u8], &str)> =
        data.iter().enumerate().map(|(i, d)| (shards[i % shards.len()].as_str(), d.as_bytes(), &d[..8])).collect();
    stream.put_to(&records).await;
    (stream, RECORDS)
}

/// Java KCL 2.7.2 (polling, checkpointing every batch) draining the same backlog on the same servers
/// (`benches/java-kcl`, built with `mvn -q compile
/// dependency:build-classpath -Dmdep.outputFile=target/classpath.txt`):
/// its own line, or why it did not run.
async fn java_drain() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/java-kcl/target");
    let Ok(classpath) = std::fs::read_to_string(dir.join("classpath.txt")) else {
        return "Java KCL: not built (see benches/java-kcl/pom.xml)".into();
    };
    let (stream, records) = backlog_stream().await;
    let output = tokio::process::Command::new("java")
        .args(["-cp", &format!("{}:{}", dir.join("classes").display(), classpath.trim()), "bench.Drain"])
        .args([&stream.name, &unique("bench-java-app"), &records.to_string()])
        .output()
        .await
        .expect("java runs");
    let text = String::from_utf8_lossy(&output.stdout);
    match text.lines().find(|l| l.starts_with("start -> drained ")) {
        Some(line) => format!("Java KCL 2.7.2: {line}"),
        None => format!("Java KCL did not finish: {}", String::from_utf8_lossy(&output.stderr).lines().last().unwrap_or_default()),
    }
}

async fn reads_and_backlog() {
    println!("{}", java_drain().await);
    let (stream, records) = backlog_stream().await;
    let proxy = proxy_for("KINESIS").await;
    let started = tokio::time::Instant::now();
    let mut host = start(&proxy, "KINESIS", &stream.name);
    // Counted as the lines come: scanning 40,000 lines at each new one would hold the log's reader up.
    let counted = std::cell::Cell::new((0, 0));
    let count = |log: &[String]| {
        let (looked, found) = counted.get();
        let found = found + log[looked..].iter().filter(|l| l.contains("kcl_host::guest: record ")).count();
        counted.set((log.len(), found));
        found
    };
    host.wait_for("the first record", LIMIT, |log| count(log) >= 1).await;
    let first = tokio::time::Instant::now();
    host.wait_for("the backlog drained", LIMIT, |log| count(log) >= records).await;
    let drained = tokio::time::Instant::now();
    let cpu = host.cpu_seconds();
    // Idle now: ten seconds of reads with nothing new.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_to = tokio::time::Instant::now();
    let (_, log) = host.interrupt().await;
    let twice = delivered_twice(&log);
    let retried = log.iter().filter(|l| l.contains("trying again in place")).count();
    println!(
        "kcl-host: start -> drained {:.1} s; first record -> drained {:.1} s; {cpu:.1} CPU-seconds; {twice} records delivered twice; {retried} reads retried in place",
        (drained - started).as_secs_f64(),
        (drained - first).as_secs_f64()
    );
    println!(
        "GetRecords calls per shard-second: {:.2} draining, {:.2} idle",
        calls_per_shard_second(&proxy, first, drained),
        calls_per_shard_second(&proxy, drained, idle_to)
    );
}

/// `cargo bench --bench recovery [-- dynamodb|kinesis|backlog]`: every part, or some.
#[tokio::main]
async fn main() {
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    if wanted("dynamodb") {
        dynamodb().await;
    }
    if wanted("kinesis") {
        kinesis().await;
    }
    if wanted("backlog") {
        reads_and_backlog().await;
    }
}
