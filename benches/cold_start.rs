//! A worker's first start with an empty compile cache, per SDK (the Rust,
//! Go, Python and JavaScript counters), against the local servers: seconds
//! from spawning `kcl-host run` to its first record processed,
//! - compiling the component itself (nothing deployed);
//! - after `kcl-host deploy` of the same file with `KCL_HOST_ARTIFACT_KEY`
//!   (the compiled code it stored loaded instead), the worker having the key;
//! - the same with an older file (the Rust `noop`) on the worker's command
//!   line: the deployed version runs, and neither is compiled.
//!
//! Each start has its own empty `--cache-dir`; one shard, one new record.
//! Run with `bash scripts/servers.sh start && source .servers/env && cargo
//! bench -p kcl-host --bench cold_start`; figures go in docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use kcl_testkit::process::KclHost;
use kcl_testkit::{clients, unique, TestStream};

const LIMIT: Duration = Duration::from_secs(120);
const KEY: &str = "kcl-host-bench-fleet-key-0123456789abcdef";

/// Seconds from spawning a worker with `guest` on its command line (empty
/// cache; the fleet's key when `keyed`) to its first record, and whether it compiled.
async fn first_record(stream: &TestStream, application: &str, guest: &str, keyed: bool) -> (f64, bool) {
    let cache = tempfile::tempdir().unwrap();
    let (processor, dir) = (kcl_testkit::guest(guest).display().to_string(), cache.path().display().to_string());
    let args = ["run", &processor, "--stream", &stream.name, "--application", application, "--idle-time-between-reads", "200ms", "--cache-dir", &dir];
    let shard = stream.shards().await.remove(0).id;
    stream.put(&shard, &[unique("record")]).await;
    let env: &[(&str, &str)] = if keyed { &[("KCL_HOST_ARTIFACT_KEY", KEY)] } else { &[] };
    let spawned = Instant::now();
    let mut host = KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, env);
    host.wait_for("a record", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record "))).await;
    let took = spawned.elapsed().as_secs_f64();
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    (took, log.iter().any(|l| l.contains("compiling the component")))
}

#[tokio::main]
async fn main() {
    let aws = clients().await;
    println!("| guest | compiled by the worker | loaded from `kcl-host deploy`'s artifact | the same, an older file on the command line |");
    for guest in ["counter", "go-counter", "py-counter", "js-counter"] {
        let stream = TestStream::create(&aws.kinesis, &unique("bench-cold-start"), 1).await;
        let application = unique("bench-cold-start-app");
        let (compiled, compiling) = first_record(&stream, &application, guest, false).await;
        assert!(compiling, "{guest}: the first start compiles");
        let deploy = std::process::Command::new(env!("CARGO_BIN_EXE_kcl-host"))
            .args(["deploy", &kcl_testkit::guest(guest).display().to_string(), "--application", &application])
            .env("KCL_HOST_ARTIFACT_KEY", KEY)
            .output()
            .unwrap();
        assert!(deploy.status.success(), "{}", String::from_utf8_lossy(&deploy.stderr));
        let (loaded, compiling) = first_record(&stream, &application, guest, true).await;
        assert!(!compiling, "{guest}: the deployed artifact is loaded");
        let (older, compiling) = first_record(&stream, &application, "noop", true).await;
        assert!(!compiling, "{guest}: the deployed artifact is loaded, the older file not compiled");
        println!("| {guest} | {compiled:.2} s | {loaded:.2} s | {older:.2} s |");
    }
}
