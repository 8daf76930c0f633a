//! The failure policy: how long a poison record holds its shard.
//!
//! A batch of 500 records with one record the `forward` guest traps on, at
//! a few places in the batch. For each, the time from the batch's first
//! call to the shard moving past the record (its dead letter written and
//! checkpointed), through the same delivery loop `kcl-host run` uses
//! (`replay` with the failure policy), against:
//!
//! - `bisect`: `--bisect-on-error --max-retry-attempts 2 --retry-backoff
//!   100ms` (or the backoff given): the record alone goes to the dead letters;
//! - `whole batch`: Lambda's default, no bisect: the whole batch is retried
//!   twice, then all 500 records go to the dead letters;
//! - `by hand`: what an operator does without bisect: replay the batch with
//!   `kcl-host replay`, and on a failure split the file in halves and replay
//!   each, until the failing record is alone (one process per replay;
//!   thinking time not counted).
//!
//! And `run`: `kcl-host run` at the default settings (`--bisect-on-error
//! --max-retry-attempts 2 --on-failure file:...`, the default 500 ms
//! backoff) against the local servers, one shard holding a batch of 500,
//! 1,500 or 10,000 records written before the worker starts, one of them
//! `trap` in the middle: the time from the first failed call to the
//! give-up past the record (its dead letter written; its checkpoint follows),
//! from the worker's log, and the calls and shard reads it took.
//!
//! And `three`: three poison records at once on one worker at the same
//! settings, one per shard of a 3-shard stream (a `trap`, a `fail` error,
//! and a `trap` inside a KPL aggregate), the processor forwarding every
//! record to a Kinesis output: for each shard, the time from the worker's
//! start to the lease table's checkpoint at the shard's last record, minus
//! the same time in a run of the same batches without the poison records
//! (the isolation a poison record costs, as issue 43 asks it measured).
//!
//! Run with `bash scripts/build-guests.sh && cargo bench -p kcl-host --bench
//! failures [-- BACKOFF_MS]` (100 by default), and `bash scripts/servers.sh
//! start && source .servers/env && cargo bench -p kcl-host --bench failures
//! -- run` (or `-- three`) for the parts in `run`; figures go in docs/BENCHMARKS.md.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kcl_host::failure::{DeadLetters, FailureSettings};
use kcl_host::lease::dynamo::DynamoStore;
use kcl_host::lease::LeaseStore;
use kcl_host::output::{OutputSpec, Outputs, TargetSpec};
use kcl_host::records::{Batch, Record};
use kcl_host::replay::{self, ReplayPolicy};
use kcl_host::runtime::{Processor, Runtime, RuntimeConfig, ShardInfo};
use kcl_testkit::guest;

const BATCH: usize = 500;
const POISON_AT: [usize; 4] = [0, 137, 321, 499];

/// `BATCH` records, the one at `poison` saying `trap`.
fn records(poison: usize) -> Vec<String> {
    (0..BATCH).map(|i| if i == poison { "trap".to_owned() } else { format!("record-{i}") }).collect()
}

fn batch(data: &[String]) -> Batch {
    let seqs: Vec<String> = (0..data.len()).map(|i| format!("49{:054}", i + 1)).collect();
    data.iter()
        .zip(&seqs)
        .map(|(d, seq)| Record { data: d.as_bytes(), partition_key: "k", sequence_number: seq, sub_sequence_number: None, arrival_timestamp_ms: 0, explicit_hash_key: None })
        .collect()
}

/// One replay of the batch under `settings`: its time and the records given up on.
async fn with_policy(processor: &Processor, outputs: &Arc<Outputs>, data: &[String], settings: &FailureSettings) -> (Duration, usize) {
    let dead_letters = DeadLetters::printed(settings);
    let policy = ReplayPolicy { settings, dead_letters: &dead_letters };
    let started = Instant::now();
    let sinks = replay::ReplaySinks { print_checkpoints: false, outputs, state: &Arc::default(), window: None };
    let report = replay::replay(processor, ShardInfo::new("bench", "shardId-0"), batch(data), BATCH, sinks, Some(policy)).await.expect("the policy gets past the record");
    (started.elapsed(), report.given_up)
}

/// Whether `kcl-host replay` gets through `data`.
fn replays(data: &[String], dir: &Path) -> bool {
    let input = dir.join("part.jsonl");
    let lines: Vec<String> = data.iter().enumerate().map(|(i, d)| serde_json::json!({ "data": d, "sequence_number": format!("49{:054}", i + 1) }).to_string()).collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let output = format!("out=file:{}", dir.join("out.jsonl").display());
    let status = Command::new(env!("CARGO_BIN_EXE_kcl-host"))
        .args(["replay", guest("forward").to_str().unwrap(), "--input", input.to_str().unwrap(), "--output", &output, "--cache-dir"])
        .arg(kcl_testkit::test_cache_dir())
        .output()
        .expect("kcl-host runs")
        .status;
    status.success()
}

/// Bisects `data` by replaying halves until one record fails alone;
/// returns the replays it took.
fn by_hand(data: &[String], dir: &Path) -> usize {
    let mut runs = 1;
    assert!(!replays(data, dir), "the whole batch fails");
    let mut failing = data;
    while failing.len() > 1 {
        let (left, right) = failing.split_at(failing.len() / 2);
        runs += 1;
        failing = if replays(left, dir) { right } else { left };
    }
    runs
}

/// Seconds since midnight of a log line's RFC 3339 timestamp (one day's run).
fn seconds_of(line: &str) -> f64 {
    let time = line.split_whitespace().next().and_then(|t| t.split_once('T')).map(|(_, t)| t.trim_end_matches('Z')).unwrap_or_default();
    time.split(':').fold(0.0, |acc, part| acc * 60.0 + part.parse::<f64>().unwrap_or(0.0))
}

/// `kcl-host run` on a shard holding `n` records, `trap` in the middle:
/// (seconds from the first failure to the give-up, failed calls, GetShardIterator calls).
async fn in_run(n: usize) -> (f64, usize, String) {
    let aws = kcl_testkit::clients().await;
    let stream = kcl_testkit::TestStream::create(&aws.kinesis, &kcl_testkit::unique("bench-poison"), 1).await;
    let shard = stream.shards().await.remove(0).id;
    let data: Vec<String> = (0..n).map(|i| if i == n / 2 { "trap".to_owned() } else { format!("record-{i}") }).collect();
    let entries: Vec<(&str, &[u8], &str)> = data.iter().map(|d| (shard.as_str(), d.as_bytes(), "k")).collect();
    stream.put_to(&entries).await;
    let dir = tempfile::tempdir().unwrap();
    let (out, dlq) = (format!("out=file:{}", dir.path().join("out.jsonl").display()), format!("file:{}", dir.path().join("dlq.jsonl").display()));
    let (processor, cache, application) = (guest("forward").display().to_string(), kcl_testkit::test_cache_dir().display().to_string(), kcl_testkit::unique("bench-poison-app"));
    let max = n.min(10_000).to_string();
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", &cache, "--output", &out,
        "--on-failure", &dlq, "--bisect-on-error", "--max-retry-attempts", "2", "--max-records", &max,
    ];
    let host = kcl_testkit::process::KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    // Polls the dead-letter file, not the log: a predicate over the whole
    // log at every line would slow the worker's own logging down.
    let dead_letters = dir.path().join("dlq.jsonl");
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::read_to_string(&dead_letters).map_or(true, |text| text.is_empty()) {
        assert!(Instant::now() < deadline, "no dead letter");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, log) = host.interrupt().await;
    // Log lines (a backtrace's lines follow its own, without a timestamp) that report a trap.
    let failed: Vec<&String> = log.iter().filter(|l| l.starts_with("20") && l.contains("processor trapped")).collect();
    let gave_up = log.iter().find(|l| l.contains("gave up on 1 records")).unwrap();
    let requests = log.iter().find(|l| l.contains("requests sent")).and_then(|l| l.split_whitespace().find(|w| w.starts_with("Kinesis.GetShardIterator="))).unwrap_or("Kinesis.GetShardIterator=?").to_owned();
    (seconds_of(gave_up) - seconds_of(failed[0]), failed.len(), requests)
}

/// The poison record of shard `i` in [`three_at_once`], or its harmless
/// twin; an aggregate's user records carry `hash_key` (the shard's), as
/// records of another shard's range would be dropped.
fn poison_of(i: usize, poisoned: bool, hash_key: &str) -> Vec<u8> {
    let word = |w: &'static str| if poisoned { w } else { "clean" };
    match i {
        0 => word("trap").into(),
        1 => word("fail").into(),
        _ => {
            let data: Vec<String> = (0..10).map(|j| if j == 5 { word("trap").to_owned() } else { format!("user-{j}") }).collect();
            kcl_host::records::kpl::encode(data.iter().map(|d| ("k", Some(hash_key), d.as_bytes())))
        }
    }
}

/// `kcl-host run` forwarding to a Kinesis output on a 3-shard stream of
/// `n` records a shard, the record in the middle of each from
/// [`poison_of`]: for each shard, the seconds from the worker's start to
/// its checkpoint at the shard's last record.
async fn three_at_once(n: usize, poisoned: bool) -> Vec<f64> {
    use kcl_testkit::{unique, TestStream};
    let aws = kcl_testkit::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-poison3"), 3).await;
    let output = TestStream::create(&aws.kinesis, &unique("bench-poison3-out"), 1).await;
    let (shards, hash_keys): (Vec<String>, Vec<String>) = stream.shards().await.into_iter().map(|s| (s.id, s.starting_hash_key)).unzip();
    let mut last = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let poison = poison_of(i, poisoned, &hash_keys[i]);
        let data: Vec<Vec<u8>> = (0..n).map(|r| if r == n / 2 { poison.clone() } else { format!("record-{r}").into_bytes() }).collect();
        let entries: Vec<(&str, &[u8], &str)> = data.iter().map(|d| (shard.as_str(), d.as_slice(), "k")).collect();
        last.push(stream.put_to(&entries).await.pop().unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let (out, dlq) = (format!("out=kinesis:{}", output.name), format!("file:{}", dir.path().join("dlq.jsonl").display()));
    let (processor, cache, application) = (guest("forward").display().to_string(), kcl_testkit::test_cache_dir().display().to_string(), unique("bench-poison3-app"));
    let max = n.to_string();
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", &cache, "--output", &out,
        "--on-failure", &dlq, "--bisect-on-error", "--max-retry-attempts", "2", "--max-records", &max,
    ];
    let started = Instant::now();
    let host = kcl_testkit::process::KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    let table = DynamoStore::new(aws.dynamodb.clone(), &application);
    let mut done: Vec<Option<f64>> = vec![None; shards.len()];
    let deadline = started + Duration::from_secs(300);
    while done.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "not every shard checkpointed at its last record: {done:?}");
        // The table appears once the worker has started.
        for lease in table.list().await.unwrap_or_default() {
            let Some(i) = shards.iter().position(|s| lease.key.shard_id() == s) else { continue };
            if done[i].is_none() && lease.checkpoint.as_column() == last[i] {
                done[i] = Some(started.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.interrupt().await;
    let dead_letters = std::fs::read_to_string(dir.path().join("dlq.jsonl")).unwrap_or_default();
    assert_eq!(dead_letters.lines().count(), if poisoned { 3 } else { 0 }, "one dead letter per poison record:\n{dead_letters}");
    done.into_iter().map(Option::unwrap).collect()
}

fn main() {
    if std::env::args().any(|a| a == "three") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        println!("{:>6} {:>9} {:>14} {:>15} {:>10}", "batch", "shard", "clean run (s)", "poisoned (s)", "over (s)");
        for n in [500, 1_500] {
            let clean = rt.block_on(three_at_once(n, false));
            let poisoned = rt.block_on(three_at_once(n, true));
            for (i, what) in ["trap", "fail", "KPL trap"].iter().enumerate() {
                println!("{n:>6} {what:>9} {:>14.2} {:>15.2} {:>10.2}", clean[i], poisoned[i], poisoned[i] - clean[i]);
            }
        }
        return;
    }
    if std::env::args().any(|a| a == "run") {
        let rt = tokio::runtime::Runtime::new().unwrap();
        println!("{:>8} {:>28} {:>14} {:>30}", "batch", "first failure -> give-up (s)", "failed calls", "shard reads");
        for n in [500, 1_500, 10_000] {
            let (seconds, calls, reads) = rt.block_on(in_run(n));
            println!("{n:>8} {seconds:>28.2} {calls:>14} {reads:>30}");
        }
        return;
    }
    // The backoff floor, in ms: the first argument, 100 by default.
    let backoff = Duration::from_millis(std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let runtime = Runtime::new(RuntimeConfig { cache_dir: Some(kcl_testkit::test_cache_dir()), max_instances: 4, ..Default::default() }).unwrap();
    let processor = rt.block_on(Processor::load(&runtime, &guest("forward"))).unwrap();
    let outputs = Outputs::discarding(&[OutputSpec { name: "out".into(), target: TargetSpec::Stdout }]);
    let dir = tempfile::tempdir().unwrap();
    let on_failure = Some(TargetSpec::File(dir.path().join("dlq.jsonl")));
    let policy = |bisect| FailureSettings {
        max_retry_attempts: Some(2),
        bisect_on_error: bisect,
        on_failure: on_failure.clone(),
        retry_backoff: backoff,
        ..FailureSettings::default()
    };
    let clean = rt.block_on(with_policy(&processor, &outputs, &records(usize::MAX), &policy(true))).0;
    println!("a batch of {BATCH} with no poison record: {:.1} ms", clean.as_secs_f64() * 1e3);
    println!("{:>9} {:>22} {:>26} {:>26}", "poison at", "bisect (s, given up)", "whole batch (s, given up)", "by hand (s, replays)");
    for at in POISON_AT {
        let data = records(at);
        let (bisect, bisect_lost) = rt.block_on(with_policy(&processor, &outputs, &data, &policy(true)));
        let (whole, whole_lost) = rt.block_on(with_policy(&processor, &outputs, &data, &policy(false)));
        let started = Instant::now();
        let runs = by_hand(&data, dir.path());
        let hand = started.elapsed();
        println!(
            "{at:>9} {:>15.2} s, {bisect_lost:>3} {:>19.2} s, {whole_lost:>3} {:>19.2} s, {runs:>3}",
            bisect.as_secs_f64(),
            whole.as_secs_f64(),
            hand.as_secs_f64()
        );
    }
}
