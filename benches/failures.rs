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
//! Run with `bash scripts/build-guests.sh && cargo bench -p kcl-host --bench
//! failures [-- BACKOFF_MS]` (100 by default); figures go in docs/BENCHMARKS.md.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kcl_host::failure::{DeadLetters, FailureSettings};
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
    let dead_letters = DeadLetters::printed(settings, "bench");
    let policy = ReplayPolicy { settings, dead_letters: &dead_letters };
    let started = Instant::now();
    let report = replay::replay(processor, ShardInfo::new("bench", "shardId-0"), batch(data), BATCH, false, outputs, Some(policy)).await.expect("the policy gets past the record");
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

fn main() {
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
