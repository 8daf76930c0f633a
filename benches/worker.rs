//! Worker start-up and child pickup against the local servers, measured on
//! the `kcl-host` binary's own log:
//! - start → every shard processing (its processor initialized), for 1, 16
//!   and 64 shards;
//! - parent `SHARD_END` written → first child record processed.
//!
//! Run with `bash scripts/servers.sh start && source .servers/env &&
//! cargo bench -p kcl-host --bench worker`; figures go in docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use kcl_testkit::process::KclHost;
use kcl_testkit::{clients, unique, TestStream};

const RUNS: usize = 3;
const LIMIT: Duration = Duration::from_secs(120);

fn start(stream: &str, cache: &str) -> KclHost {
    let processor = kcl_testkit::guest("counter").display().to_string();
    let application = unique("bench-app");
    KclHost::spawn(
        env!("CARGO_BIN_EXE_kcl-host").as_ref(),
        &["run", &processor, "--stream", stream, "--application", &application, "--idle-time-between-reads", "200ms", "--cache-dir", cache],
    )
}

/// Seconds since midnight of a log line's RFC 3339 timestamp.
fn timestamp(line: &str) -> f64 {
    let time = line.split('T').nth(1).expect("timestamped line").trim_end_matches(|c: char| !c.is_ascii_digit());
    let time = &time[..time.find('Z').unwrap_or(time.len())];
    let mut parts = time.split(':');
    let (h, m, s): (f64, f64, f64) = (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    h * 3600.0 + m * 60.0 + s
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let aws = clients().await;
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();

    for shards in [1, 16, 64] {
        let stream = TestStream::create(&aws.kinesis, &unique("bench-start"), shards).await;
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            let started = Instant::now();
            let mut host = start(&stream.name, &cache);
            host.wait_for("every shard initialized", LIMIT, |log| {
                log.iter().filter(|l| l.contains("kcl_host::guest: initialize ")).count() >= shards as usize
            })
            .await;
            runs.push(started.elapsed().as_secs_f64());
            let (status, log) = host.interrupt().await;
            assert!(status.success(), "{status:?}\n{}", log.join("\n"));
        }
        println!("start -> all {shards} shards processing: median {:.3} s over {RUNS} runs ({runs:.3?})", median(runs.clone()));
    }

    let mut pickups = Vec::new();
    for _ in 0..RUNS {
        let stream = TestStream::create(&aws.kinesis, &unique("bench-child"), 1).await;
        let parent = stream.shards().await[0].id.clone();
        stream.put(&parent, &(0..20).map(|i| format!("p-{i}")).collect::<Vec<_>>()).await;
        let children = stream.split(&parent).await;
        for child in &children {
            stream.put(child, &(0..10).map(|i| format!("{child}-{i}")).collect::<Vec<_>>()).await;
        }
        let mut host = start(&stream.name, &cache);
        host.wait_for("all 40 records", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= 40).await;
        let (_, log) = host.interrupt().await;
        let end = log.iter().find(|l| l.contains("SHARD_END written")).expect("parent ended");
        let first_child = log
            .iter()
            .find(|l| l.contains("kcl_host::guest: record ") && children.iter().any(|c| l.contains(c.as_str())))
            .expect("a child record");
        pickups.push(timestamp(first_child) - timestamp(end));
    }
    println!("parent SHARD_END -> first child record: median {:.3} s over {RUNS} runs ({pickups:.3?})", median(pickups.clone()));
}
