//! kcl-host end to end: `kcl-host run` as a process against the local
//! Kinesis and DynamoDB servers, a module per topic; the helpers they share
//! are here.
//!
//! Needs `scripts/servers.sh start` and `scripts/build-guests.sh` first
//! (`scripts/test.sh` does both).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kcl_host::aws::AwsClients;
use kcl_host::lease::{Checkpoint, Lease};
use kcl_testkit::process::{Delivered, KclHost};
use kcl_testkit::{clients, leases, test_cache_dir, unique, write_leases, TestStream};

mod artifacts;
mod failures;
mod dashboard;
mod dynamodb_streams;
mod faults;
mod fleet;
mod handover;
mod iam;
mod image;
mod lifecycle;
mod metrics;
mod operator;
mod outputs;
mod parallel;
mod records;
mod rollout;
mod state;
mod streams;
mod swap;
mod windows;

/// A guest's path, as an argument.
fn guest(name: &str) -> String {
    kcl_testkit::guest(name).display().to_string()
}

/// Generous: the servers are slow on a loaded 2-core machine. Nothing waits
/// this long unless something is broken.
const LIMIT: Duration = Duration::from_secs(90);
/// The signal a service manager stops a process with.
const SIGTERM: i32 = 15;

fn payloads(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn start(guest_name: &str, stream: &str, application: &str, worker: &str) -> KclHost {
    start_with(guest_name, stream, application, worker, &[])
}

/// `kcl-host run` with the tests' settings plus `extra` flags.
fn start_with(guest_name: &str, stream: &str, application: &str, worker: &str, extra: &[&str]) -> KclHost {
    start_with_env(guest_name, stream, application, worker, extra, &[])
}

/// [`start_with`] with `env` set too (another DynamoDB endpoint, say).
fn start_with_env(guest_name: &str, stream: &str, application: &str, worker: &str, extra: &[&str], env: &[(&str, &str)]) -> KclHost {
    let (processor, cache) = (guest(guest_name), test_cache_dir().display().to_string());
    let mut args = vec![
        "run", &processor, "--stream", stream, "--application", application, "--worker-id", worker,
        "--idle-time-between-reads", "200ms", "--cache-dir", &cache,
    ];
    args.extend_from_slice(extra);
    KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, env)
}

fn lease<'a>(leases: &'a [Lease], key: &str) -> &'a Lease {
    leases.iter().find(|l| l.key == key).unwrap_or_else(|| panic!("no lease for {key} in {leases:#?}"))
}

/// Records per shard, checking each shard's records came in sequence order.
fn by_shard(delivered: &[Delivered]) -> BTreeMap<String, Vec<String>> {
    let mut shards: BTreeMap<String, Vec<&Delivered>> = BTreeMap::new();
    for d in delivered {
        shards.entry(d.shard.clone()).or_default().push(d);
    }
    shards
        .into_iter()
        .map(|(shard, records)| {
            for pair in records.windows(2) {
                let (a, b) = (&pair[0].sequence_number, &pair[1].sequence_number);
                assert!((a.len(), a) < (b.len(), b), "{shard}: {a} delivered before {b}, out of order");
            }
            (shard, records.into_iter().map(|r| r.data.clone()).collect())
        })
        .collect()
}

/// Puts one record `<prefix>-<shard>` on each of `shards`; returns their data.
async fn one_each(stream: &TestStream, shards: &[String], prefix: &str) -> Vec<String> {
    let mut all = Vec::new();
    for shard in shards {
        let data = format!("{prefix}-{shard}");
        stream.put(shard, std::slice::from_ref(&data)).await;
        all.push(data);
    }
    all
}

/// Whether every record whose data is in `data` was processed.
fn processed(log: &[String], data: &[String]) -> bool {
    let done: BTreeSet<String> = delivered(log).into_iter().map(|d| d.data).collect();
    data.iter().all(|d| done.contains(d))
}

/// How often a worker's `log` says it judged another worker dead.
fn judged_dead(log: &[String]) -> usize {
    log.iter().filter(|l| l.contains("the fleet changed") && l.contains("dead={\"worker-")).count()
}

fn count_lines(log: &[String], needle: &str) -> usize {
    log.iter().filter(|l| l.contains(needle)).count()
}

/// Runs `kcl-host` to its exit with `env` set (a variable given as "" is
/// removed); returns (exit code, everything it printed).
async fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kcl-host"));
    command.args(args).env("NO_COLOR", "1");
    for (name, value) in env {
        match value.is_empty() {
            true => command.env_remove(name),
            false => command.env(name, value),
        };
    }
    let output = command.output().await.expect("kcl-host runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), text)
}

/// A local address with a free port, for an admin listener.
fn admin_address() -> String {
    format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
}

/// `GET path` on a local HTTP server: (status line, body).
async fn http_get(address: &str, path: &str) -> (String, String) {
    http(address, "GET", path, "text/plain", b"").await
}

/// One request to a local HTTP server: (status line, body).
async fn http(address: &str, method: &str, path: &str, content_type: &str, body: &[u8]) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("the admin listener accepts");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a full response");
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// The value of the series `name` whose labels include `shard="<shard>"`, from Prometheus text.
fn series(text: &str, name: &str, shard: Option<&str>) -> Option<f64> {
    let label = shard.map(|s| format!("shard=\"{s}\""));
    series_labelled(text, name, label.as_slice())
}

/// The value of the series `name` whose labels include each of `labels` (`key="value"`).
fn series_labelled(text: &str, name: &str, labels: &[String]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        let (metric, have) = key.split_once('{').unwrap_or((key, ""));
        (metric == name && labels.iter().all(|l| have.contains(l.as_str()))).then(|| value.parse().ok()).flatten()
    })
}

/// The swap tests' versions, as the host names them on every guest line
/// (the build stamps each guest with its package's name and version).
const V1: &str = "(kcl-example-counter@0.1.0)";

const V2: &str = "(kcl-test-guest-tagged@2.0.0)";

/// Every record the counter or the tagged guest logged, in log order.
fn delivered(log: &[String]) -> Vec<Delivered> {
    log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).collect()
}

/// Reads the control table until every heartbeat row of the application's
/// `workers` reports `hash` (each is rewritten every third of the failover time).
async fn heartbeats_report(aws: &AwsClients, application: &str, hash: &str, workers: usize) {
    let control = kcl_host::lease::heartbeat::HeartbeatTable::new(aws.dynamodb.clone(), application);
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let read = control.read().await.unwrap();
        let running: Vec<String> = read.heartbeats.iter().filter_map(|h| Some(kcl_host::swap::Version::running(h)?.hash)).collect();
        if running.len() == workers && running.iter().all(|r| r == hash) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the heartbeat reports {running:?}, not {hash}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Records delivered by any worker, each with how many times it came.
fn delivery_counts<'a>(all: impl IntoIterator<Item = &'a Delivered>) -> BTreeMap<&'a str, (usize, &'a Delivered)> {
    let mut counts: BTreeMap<&str, (usize, &Delivered)> = BTreeMap::new();
    for d in all {
        counts.entry(d.data.as_str()).or_insert((0, d)).0 += 1;
    }
    counts
}
