//! `--parallelism N` on one shard, against the local servers: a backlog of
//! 16 partition keys drained by the `forward` guest told to wait 2 ms per
//! record (`--var pause-ms=2`, as a processor calling an API per record
//! would), for N = 1, 2, 4, 8, 16; then (`-- calls`) the same with calls
//! of 10 records (`--max-records 10`) waiting 20 ms each.
//! Records/s from the worker's own log (first record to last), and the
//! worker's RSS once the backlog is drained: per-instance memory is the
//! growth from N = 1 over the instances added.
//!
//! `KCL_HOST_BINARY=<path>` runs another build of `kcl-host` (an older one,
//! for N = 1 before and after: `--parallelism` is passed only above 1).
//!
//! Run with `bash scripts/build-guests.sh && bash scripts/servers.sh start &&
//! source .servers/env && cargo bench -p kcl-host --bench parallel`; figures
//! go in docs/BENCHMARKS.md. `-- 1 8` runs only those N.

use std::time::Duration;

use kcl_testkit::process::{log_seconds, KclHost};
use kcl_testkit::{clients, unique, TestStream};

const KEYS: usize = 16;
const PER_KEY: usize = 200;
const LIMIT: Duration = Duration::from_secs(180);

/// Drains the backlog with `parallelism` instances, each call given at
/// most `max_records`: (records/s, RSS MiB).
async fn drain(parallelism: usize, max_records: &str, cache: &str) -> (f64, f64) {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-par"), 1).await;
    let records: Vec<(String, String)> = (0..PER_KEY).flat_map(|n| (0..KEYS).map(move |k| (format!("k{k}/{n}"), format!("key-{k}")))).collect();
    let borrowed: Vec<(&[u8], &str)> = records.iter().map(|(d, k)| (d.as_bytes(), k.as_str())).collect();
    stream.put_by_key(&borrowed).await;
    let processor = kcl_testkit::guest("forward").display().to_string();
    let (application, n) = (unique("bench-par-app"), parallelism.to_string());
    let out = format!("out=file:{}", std::env::temp_dir().join(format!("{application}.out")).display());
    #[rustfmt::skip]
    let mut args = vec![
        "run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", cache,
        "--idle-time-between-reads", "200ms", "--max-records", max_records, "--var", "pause-ms=2", "--output", &out,
    ];
    if parallelism > 1 {
        args.extend(["--parallelism", &n]);
    }
    let binary = std::env::var("KCL_HOST_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kcl-host").into());
    let mut host = KclHost::spawn(binary.as_ref(), &args);
    let total = records.len();
    host.wait_for("the backlog drained", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= total).await;
    let rss = host.rss_mib();
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let times: Vec<f64> = log.iter().filter(|l| l.contains("kcl_host::guest: record ")).map(|l| log_seconds(l)).collect();
    let took = times.last().unwrap() - times.first().unwrap();
    (total as f64 / took, rss)
}

#[tokio::main]
async fn main() {
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let asked: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let ns = if asked.is_empty() { vec![1, 2, 4, 8, 16] } else { asked };
    let max_records = if args.iter().any(|a| a == "calls") { "10" } else { "10000" };
    // Once before the figures: the first start compiles the component.
    drain(ns[0], max_records, &cache).await;
    let mut base: Option<(f64, f64)> = None;
    for n in ns {
        let (rate, rss) = drain(n, max_records, &cache).await;
        let (base_rate, base_rss) = *base.get_or_insert((rate, rss));
        let per_instance = if n > 1 { format!(", {:.2} MiB per added instance", (rss - base_rss) / (n - 1) as f64) } else { String::new() };
        println!(
            "--parallelism {n:>2} --max-records {max_records}: {rate:>6.0} records/s ({:.2}x the first N), RSS {rss:.0} MiB{per_instance}",
            rate / base_rate
        );
    }
}
