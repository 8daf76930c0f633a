//! The dashboard at scale, against the local servers: one `kcl-host run`
//! worker on a 200-shard stream (`-- 1000`: 1,000 shards, each read every
//! 10 s, as the worker bench's thousand does), its admin listener serving
//! the page, and records flowing so every shard has throughput to draw:
//! - the page's first render in Chromium (Playwright,
//!   `benches/dashboard/render.mjs`): from navigation start to the first
//!   drawing of the report, in real time, median of 5 fresh pages;
//! - the size of `status.json`;
//! - the worker's CPU without a page and with one (its requests: GET
//!   /status.json every 2 s), in alternating 30 s windows, as % of a core.
//!
//! With `-- table 1000`: no worker, but a lease table of 1,000 shards
//! written as a fleet of 10 Java KCL workers would leave it (every tenth
//! shard the child of one at SHARD_END: 100 families in the lineage graph),
//! served by `kcl-host dashboard`: the
//! page's first render and the size of its report.
//!
//! Run with `bash scripts/servers.sh start && source .servers/env &&
//! npm ci --prefix benches/dashboard && cargo bench -p kcl-host --bench
//! dashboard [-- 1000 | -- table 1000]`; figures go in docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use kcl_host::lease::{Checkpoint, Lease};
use kcl_testkit::process::KclHost;
use kcl_testkit::{clients, unique, TestStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(300);
const WINDOW: Duration = Duration::from_secs(30);
const PAGE_POLL: Duration = Duration::from_secs(2);

/// `GET path` from `address`: the body's length.
async fn get(address: &str, path: &str) -> usize {
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("the admin listener accepts");
    let head = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response[..response.len().min(300)]));
    let body = response.windows(4).position(|w| w == b"\r\n\r\n").expect("a full response") + 4;
    response.len() - body
}

/// The worker's CPU over `WINDOW`, as a fraction of a core; with `page`, while a page's requests run.
async fn cpu_share(worker: &KclHost, admin: &str, page: bool) -> f64 {
    let (before, started) = (worker.cpu_seconds(), Instant::now());
    while started.elapsed() < WINDOW {
        if page {
            get(admin, "/status.json").await;
        }
        tokio::time::sleep(PAGE_POLL).await;
    }
    (worker.cpu_seconds() - before) / started.elapsed().as_secs_f64()
}

/// The page at `url`, opened 5 times: each first render in ms, sorted.
async fn first_renders(url: &str) -> Vec<f64> {
    let output = tokio::process::Command::new("node")
        .args(["benches/dashboard/render.mjs", url, "5"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .await
        .expect("node runs");
    assert!(output.status.success(), "render.mjs: {}", String::from_utf8_lossy(&output.stderr));
    let timings: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut renders: Vec<f64> = timings["first_render_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    renders.sort_by(f64::total_cmp);
    renders
}

/// `-- table N`: the page of an N-shard lease table, served by `kcl-host dashboard`.
async fn table(shards: usize) {
    let aws = clients().await;
    let application = unique("bench-dashboard-table");
    let rows: Vec<Lease> = (0..shards)
        .map(|i| {
            // Every tenth shard the child of the one before it, which is at SHARD_END.
            let parents = if i % 10 == 9 { BTreeSet::from([format!("shardId-{:012}", i - 1)]) } else { BTreeSet::new() };
            let checkpoint = if i % 10 == 8 { Checkpoint::ShardEnd } else { Checkpoint::TrimHorizon };
            let mut lease = Lease::new(format!("shardId-{i:012}").as_str(), checkpoint, parents);
            lease.owner = Some(format!("java-worker-{}", i % 10));
            lease
        })
        .collect();
    kcl_testkit::write_leases(&aws.dynamodb, &application, &rows).await;
    let mut dashboard = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &["dashboard", "--application", &application, "--listen", "127.0.0.1:0"]);
    dashboard.wait_for("its address", LIMIT, |log| log.iter().any(|l| l.contains("dashboard on http://"))).await;
    let log = dashboard.log().await;
    let line = log.iter().find(|l| l.contains("dashboard on http://")).unwrap();
    let url = line[line.find("http://").unwrap()..].split_whitespace().next().unwrap().to_owned();
    let address = url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let read = Instant::now();
    let json_bytes = get(&address, "/status.json").await;
    let read_ms = read.elapsed().as_secs_f64() * 1000.0;
    let renders = first_renders(&url).await;
    println!(
        "{shards} shards (a table only): first render {:.0} ms (median of 5; {renders:?}); status.json {:.0} KiB, read from the tables in {read_ms:.0} ms",
        renders[renders.len() / 2],
        json_bytes as f64 / 1024.0,
    );
    dashboard.kill().await;
}

#[tokio::main]
async fn main() {
    let shards: i32 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(200);
    if std::env::args().any(|a| a == "table") {
        table(shards as usize).await;
        return;
    }
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-dashboard"), shards).await;
    let application = unique("bench-dashboard-app");
    let admin = format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let processor = kcl_testkit::guest("counter").display().to_string();
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    let idle = if shards > 200 { "10s" } else { "2s" };
    let mut worker = KclHost::spawn(
        env!("CARGO_BIN_EXE_kcl-host").as_ref(),
        &["run", &processor, "--stream", &stream.name, "--application", &application, "--admin-listen", &admin, "--idle-time-between-reads", idle, "--cache-dir", &cache],
    );
    worker.wait_for("every shard initialized", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: initialize ")).count() >= shards as usize).await;
    // A record on every shard each second, while it is measured.
    let producer = kcl_testkit::producer::Producer::start(&stream, "bench", Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_secs(15)).await;

    let renders = first_renders(&format!("http://{admin}/")).await;
    let json_bytes = get(&admin, "/status.json").await;

    let mut without = Vec::new();
    let mut with = Vec::new();
    for _ in 0..2 {
        without.push(cpu_share(&worker, &admin, false).await);
        with.push(cpu_share(&worker, &admin, true).await);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let records = producer.stop().await.len();
    println!(
        "{shards} shards: first render {:.0} ms (median of 5; {renders:?}); status.json {:.0} KiB; worker CPU {:.2}% of a core without a page, \
         {:.2}% with one (+{:.2}); windows without {without:.4?}, with {with:.4?}; {records} records put meanwhile",
        renders[renders.len() / 2],
        json_bytes as f64 / 1024.0,
        mean(&without) * 100.0,
        mean(&with) * 100.0,
        (mean(&with) - mean(&without)) * 100.0,
    );
    worker.kill().await;
}
