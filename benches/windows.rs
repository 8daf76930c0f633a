//! Tumbling windows against the local servers (DynamoDB on moto, for its
//! transactions): one shard, a producer putting 100 purchases a second
//! over 20 users for 30 s, read by the `window-totals` example with
//! `--window 5s` (each window's totals written to a DynamoDB table as it
//! closes) and, for the baseline, by `user-totals` (the same sums in state,
//! no windows, no outputs). Per run: the DynamoDB requests the worker sent
//! (its exit line) per 1,000 records, and with windows how long after each
//! window's end its close was committed (its "closed window" log lines).
//!
//! Run with `bash scripts/build-guests.sh && bash scripts/servers.sh start
//! --kcl3 && source .servers/env && cargo bench -p kcl-host --bench windows`;
//! figures go in docs/BENCHMARKS.md.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::ScalarAttributeType;
use kcl_testkit::process::{log_seconds, requests_sent, KclHost};
use kcl_testkit::{java_kcl3, unique, TestStream};

const SECONDS: u64 = 30;
const PER_TICK: usize = 10;
const USERS: usize = 20;
const WINDOW_MS: u64 = 5_000;
const LIMIT: Duration = Duration::from_secs(120);

/// One run of `guest` (with `extra` flags) over the producer's 30 s: the
/// records put, the worker's DynamoDB requests, and its log.
async fn run(guest: &str, extra: &[&str], cache: &str) -> (usize, BTreeMap<String, u64>, Vec<String>) {
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-win"), 1).await;
    let application = unique("bench-win-app");
    let processor = kcl_testkit::guest(guest).display().to_string();
    let mut args = vec!["run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", cache, "--idle-time-between-reads", "200ms"];
    args.extend_from_slice(extra);
    let endpoint = java_kcl3::dynamodb_endpoint();
    let mut host = KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, &[("AWS_ENDPOINT_URL_DYNAMODB", &endpoint)]);
    host.wait_for("the processor", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: initialize "))).await;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last = String::new();
    for _ in 0..SECONDS * 10 {
        tick.tick().await;
        let batch: Vec<(String, String)> = (0..PER_TICK).map(|_| (format!("user-{:02}", fastrand::usize(..USERS)), format!(r#"{{"cents": {}}}"#, fastrand::i64(1..1000)))).collect();
        let borrowed: Vec<(&[u8], &str)> = batch.iter().map(|(user, data)| (data.as_bytes(), user.as_str())).collect();
        last = stream.put_by_key(&borrowed).await.pop().expect("a sequence number");
    }
    // Processed through the last record: the checkpoint reached it (and,
    // with windows, the last window closed by the clock).
    let windows = extra.contains(&"--window");
    let last_window = kcl_host::clock::unix_ms() / WINDOW_MS * WINDOW_MS;
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let leases = kcl_testkit::leases(&aws.dynamodb, &application).await;
        let done = leases.iter().any(|l| l.checkpoint.position().is_some_and(|p| p.sequence_number() == last));
        let closed = !windows || host.log().await.iter().any(|l| l.contains(&format!("closed window [{last_window},")));
        if done && closed {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the worker never processed the last record");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    ((SECONDS * 10) as usize * PER_TICK, requests_sent(&log), log)
}

/// The DynamoDB requests of `requests`, in total and by operation.
fn dynamodb(requests: &BTreeMap<String, u64>) -> (u64, String) {
    let ops: Vec<(&str, u64)> = requests.iter().filter_map(|(op, n)| Some((op.strip_prefix("DynamoDB.")?, *n))).collect();
    (ops.iter().map(|(_, n)| n).sum(), ops.iter().map(|(op, n)| format!("{op}={n}")).collect::<Vec<_>>().join(" "))
}

#[tokio::main]
async fn main() {
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    let aws = java_kcl3::clients().await;
    let table = unique("bench-window-totals");
    kcl_testkit::create_table(&aws.dynamodb, &table, &[("user", ScalarAttributeType::S), ("window_start_ms", ScalarAttributeType::N)]).await;
    let target = format!("totals=dynamodb:{table}");
    let (records, plain, _) = run("user-totals", &[], &cache).await;
    let (_, windowed, log) = run("window-totals", &["--window", "5s", "--output", &target], &cache).await;
    let (plain_total, plain_ops) = dynamodb(&plain);
    let (windowed_total, windowed_ops) = dynamodb(&windowed);
    let per_1000 = |n: u64| n as f64 * 1000.0 / records as f64;
    println!("{records} records, 1 shard, {USERS} users, {SECONDS} s");
    println!("user-totals (no windows): {plain_total} DynamoDB requests, {:.1} per 1,000 records ({plain_ops})", per_1000(plain_total));
    println!("window-totals --window 5s: {windowed_total} DynamoDB requests, {:.1} per 1,000 records ({windowed_ops})", per_1000(windowed_total));
    let mut lags: Vec<f64> = log
        .iter()
        .filter_map(|l| {
            let end_ms: u64 = l.split_once("closed window [")?.1.split_once(", ")?.1.split_once(')')?.0.parse().ok()?;
            Some(log_seconds(l) - (end_ms / 1000 % 86_400) as f64 - (end_ms % 1000) as f64 / 1000.0)
        })
        .collect();
    lags.sort_by(f64::total_cmp);
    let windows = lags.len();
    println!(
        "{windows} windows closed ({:.1} DynamoDB requests per window more than without); commit after the window's end: median {:.2} s, max {:.2} s",
        (windowed_total as f64 - plain_total as f64) / windows as f64,
        lags[windows / 2],
        lags[windows - 1]
    );
}
