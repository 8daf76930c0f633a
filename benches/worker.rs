//! Worker start-up and child pickup against the local servers, measured on
//! the `kcl-host` binary's own log:
//! - start → every shard processing (its processor initialized), for 1, 16
//!   and 64 shards, and 64 shards of the Python counter (the compile cache
//!   warm);
//! - parent `SHARD_END` written → first child record processed;
//! - with `-- thousand`: one worker on 1,000 shards (see [`thousand`]).
//!
//! Run with `bash scripts/servers.sh start && source .servers/env &&
//! cargo bench -p kcl-host --bench worker`; figures go in docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use kcl_testkit::process::{log_seconds, KclHost};
use kcl_testkit::{clients, unique, TestStream};

const RUNS: usize = 3;
const LIMIT: Duration = Duration::from_secs(120);

fn start(stream: &str, cache: &str) -> KclHost {
    start_guest("counter", stream, cache)
}

fn start_guest(guest: &str, stream: &str, cache: &str) -> KclHost {
    let processor = kcl_testkit::guest(guest).display().to_string();
    let application = unique("bench-app");
    KclHost::spawn(
        env!("CARGO_BIN_EXE_kcl-host").as_ref(),
        &["run", &processor, "--stream", stream, "--application", &application, "--idle-time-between-reads", "200ms", "--cache-dir", cache],
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One worker on a 1,000-shard stream, reading each shard every 10 s (the
/// local Kinesis server, one Node.js process, answers about 100 GetRecords
/// a second, so a faster pace would measure the server): start → all
/// processing, idle memory and CPU, requests a second, then a second worker
/// joins and the table shows 500 and 500.
async fn thousand(cache: &str) {
    const SHARDS: i32 = 1000;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-1000"), SHARDS).await;
    let application = unique("bench-1000-app");
    let processor = kcl_testkit::guest("counter").display().to_string();
    let run = |worker: &str| {
        KclHost::spawn(
            env!("CARGO_BIN_EXE_kcl-host").as_ref(),
            &["run", &processor, "--stream", &stream.name, "--application", &application, "--worker-id", worker, "--idle-time-between-reads", "10s", "--cache-dir", cache],
        )
    };
    let started = Instant::now();
    let mut one = run("w1");
    one.wait_for("every shard initialized", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: initialize ")).count() >= SHARDS as usize).await;
    let up = started.elapsed().as_secs_f64();
    // Idle: every shard read, nothing to process.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (cpu_before, idle_started) = (one.cpu_seconds(), Instant::now());
    tokio::time::sleep(Duration::from_secs(60)).await;
    let cpu = (one.cpu_seconds() - cpu_before) / idle_started.elapsed().as_secs_f64();
    let rss = one.rss_mib();
    let joined = Instant::now();
    let mut two = run("w2");
    loop {
        let leases = kcl_testkit::leases(&aws.dynamodb, &application).await;
        let second = leases.iter().filter(|l| l.owner.as_deref() == Some("w2")).count();
        if second >= SHARDS as usize / 2 {
            break;
        }
        assert!(joined.elapsed() < LIMIT, "w2 holds {second} leases after {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let handoff = joined.elapsed().as_secs_f64();
    two.wait_for("its share initialized", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: initialize ")).count() >= SHARDS as usize / 2).await;
    let elapsed = started.elapsed().as_secs_f64();
    let (status, log) = one.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let _ = two.interrupt().await;
    let requests = log.iter().find_map(|l| l.split_once("requests sent: ").map(|(_, r)| r.to_owned())).expect("the exit line");
    let per_second = |prefix: &str| -> f64 {
        requests.split_whitespace().filter_map(|p| p.split_once('=')).filter(|(op, _)| op.starts_with(prefix)).map(|(_, n)| n.parse::<f64>().unwrap()).sum::<f64>() / elapsed
    };
    println!(
        "1,000 shards, one worker: start -> all processing {up:.2} s; idle RSS {rss:.0} MiB, idle CPU {:.1}% of a core; \
         GetRecords {:.0}/s, DynamoDB {:.1}/s (whole run, w1); second worker joins -> it holds 500 {handoff:.2} s",
        cpu * 100.0,
        per_second("Kinesis.GetRecords"),
        per_second("DynamoDB."),
    );
}

/// `cargo bench --bench worker [-- thousand]`: start-up and child pickup, or 1,000 shards on one worker.
#[tokio::main]
async fn main() {
    let aws = clients().await;
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    if std::env::args().any(|a| a == "thousand") {
        thousand(&cache).await;
        return;
    }

    for (guest, shards) in [("counter", 1), ("counter", 16), ("counter", 64), ("py-counter", 64)] {
        let stream = TestStream::create(&aws.kinesis, &unique("bench-start"), shards).await;
        let mut runs = Vec::new();
        // The first run of a guest may compile it; the runs measured find it in the cache.
        for run in 0..=RUNS {
            let started = Instant::now();
            let mut host = start_guest(guest, &stream.name, &cache);
            host.wait_for("every shard initialized", LIMIT, |log| {
                log.iter().filter(|l| l.contains("kcl_host::guest: initialize ")).count() >= shards as usize
            })
            .await;
            if run > 0 {
                runs.push(started.elapsed().as_secs_f64());
            }
            let (status, log) = host.interrupt().await;
            assert!(status.success(), "{status:?}\n{}", log.join("\n"));
        }
        println!("{guest}: start -> all {shards} shards processing: median {:.3} s over {RUNS} runs ({runs:.3?})", median(runs.clone()));
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
        pickups.push(log_seconds(first_child) - log_seconds(end));
    }
    println!("parent SHARD_END -> first child record: median {:.3} s over {RUNS} runs ({pickups:.3?})", median(pickups.clone()));
}
