//! The monthly DynamoDB bill of a kcl-host fleet, per renewal mode and
//! fleet size, beside Java KCL 2.x's at its defaults (on-demand prices,
//! us-east-1: $0.625 per million write request units, $0.125 per million
//! read request units; 30 days).
//!
//! - **Counted** (8, 64 and 1,000 leases): two `kcl-host run` workers
//!   (failover 10 s, idle stream) with their DynamoDB endpoint behind the
//!   test kit's fault proxy with no fault set, which counts every request
//!   by table and operation over two minutes once the fleet is balanced.
//!   Request units from the rows' own sizes (DynamoDB's item-size rule,
//!   read from both tables at the end): a write of an item up to 1 KB is
//!   one unit; a scan reads its bytes in 4 KB units, halved when
//!   eventually consistent (the lease scans; the heartbeat reads are
//!   strongly consistent).
//! - **Modelled** (the same sizes, and 10,000 leases on 200 workers): the
//!   worker loop's rhythm from the library's own functions (heartbeat every
//!   third of the failover time, [`FleetWatch`]'s read intervals, take
//!   passes every [`SETTLED_PASS_EVERY`] failover times while settled),
//!   with the row sizes counted at 1,000 leases. `lease::scale` runs that
//!   fleet on a virtual clock and counts its requests.
//! - **Java KCL 2.x**, modelled at every size: a renewal per lease every
//!   failover/3 − 25 ms, and a lease scan (eventually consistent) per
//!   worker every 2 × (failover + 25 ms), on rows the size of kcl-host's.
//!
//! Application checkpoints are left out of every column: the same for all.
//!
//! Run with `bash scripts/servers.sh start && source .servers/env &&
//! cargo bench --profile dev -p kcl-host --bench bill [-- 8 64 1000]`;
//! figures go in docs/BENCHMARKS.md.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use kcl_host::lease::coordinator::SETTLED_PASS_EVERY;
use kcl_host::lease::heartbeat::{control_table_name, Heartbeat};
use kcl_host::lease::watch::{poll_interval, FleetWatch};
use kcl_host::metrics::progress::progress_table_name;
use kcl_testkit::faults::FaultProxy;
use kcl_testkit::process::KclHost;
use kcl_testkit::{clients, unique, TestStream};

const FAILOVER: Duration = Duration::from_secs(10);
const STEADY: Duration = Duration::from_secs(120);
const LIMIT: Duration = Duration::from_secs(600);
const MINUTES_A_MONTH: f64 = 30.0 * 24.0 * 60.0;
const DOLLARS_PER_WRITE_UNIT: f64 = 0.625e-6;
const DOLLARS_PER_READ_UNIT: f64 = 0.125e-6;

/// Read and write request units a minute.
#[derive(Clone, Copy, Debug, Default)]
struct Units {
    read: f64,
    write: f64,
}

impl Units {
    fn dollars_a_month(self) -> f64 {
        MINUTES_A_MONTH * (self.read * DOLLARS_PER_READ_UNIT + self.write * DOLLARS_PER_WRITE_UNIT)
    }
}

/// DynamoDB's size of an item: attribute names and values, in bytes.
fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) => s.len(),
            // Roughly one byte per two significant digits, plus one.
            AttributeValue::N(n) => n.trim_start_matches('-').len().div_ceil(2) + 1,
            AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
            AttributeValue::Ss(items) => items.iter().map(String::len).sum(),
            AttributeValue::L(items) => 3 + items.iter().map(|i| 1 + value(i)).sum::<usize>(),
            AttributeValue::M(map) => 3 + map.iter().map(|(k, v)| 1 + k.len() + value(v)).sum::<usize>(),
            _ => 0,
        }
    }
    item.iter().map(|(name, v)| name.len() + value(v)).sum()
}

/// Every item of `table`, by size.
async fn sizes(db: &aws_sdk_dynamodb::Client, table: &str) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut pages = db.scan().table_name(table).into_paginator().send();
    while let Some(page) = pages.next().await {
        sizes.extend(page.expect("Scan").items().iter().map(item_size));
    }
    sizes
}

/// Read units of one whole-table scan of items of `sizes`.
fn scan_units(sizes: &[usize], consistent: bool) -> f64 {
    let units = sizes.iter().sum::<usize>().div_ceil(4096).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

/// Write units of one write of the largest item of `sizes`.
fn write_units(sizes: &[usize]) -> f64 {
    sizes.iter().max().copied().unwrap_or(1).div_ceil(1024).max(1) as f64
}

/// What two workers on `leases` shards sent in [`STEADY`], per minute and
/// in units, and the rows' sizes.
struct Counted {
    units: Units,
    lease_rows: Vec<usize>,
    control_rows: Vec<usize>,
    per_minute: BTreeMap<String, f64>,
}

async fn count(leases: i32, renewal: &str) -> Counted {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-bill"), leases).await;
    let application = unique("bench-bill-app");
    let proxy = FaultProxy::start(&std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("the local servers' endpoints")).await;
    let processor = kcl_testkit::guest("counter").display().to_string();
    let cache = std::env::temp_dir().join("kcl-host-bench-cache").display().to_string();
    let start = |worker: &str| {
        let args = [
            "run", &processor, "--stream", &stream.name, "--application", &application, "--worker-id", worker, "--cache-dir", &cache,
            "--failover-time", "10s", "--lease-renewal", renewal,
        ];
        KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, &[("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint.as_str())])
    };
    let share = leases as usize / 2;
    let mut a = start("w1");
    a.wait_for("the lease table", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;
    let mut b = start("w2");
    for w in [&mut a, &mut b] {
        w.wait_for("its share", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: initialize ")).count() >= share).await;
    }
    // Balanced: from here on, the steady state.
    let from = tokio::time::Instant::now();
    tokio::time::sleep(STEADY).await;
    let to = tokio::time::Instant::now();
    let lease_rows = sizes(&aws.dynamodb, &application).await;
    let control_rows = sizes(&aws.dynamodb, &control_table_name(&application)).await;
    // Gone with the workers' rows once they stop: read before.
    let progress_rows = sizes(&aws.dynamodb, &progress_table_name(&application)).await;
    for w in [a, b] {
        let (status, log) = w.interrupt().await;
        assert!(status.success(), "{}", log.join("\n"));
    }
    let minutes = (to - from).as_secs_f64() / 60.0;
    let mut per_minute: BTreeMap<String, f64> = BTreeMap::new();
    let mut units = Units::default();
    for seen in proxy.counts().requests.iter().filter(|r| r.at >= from && r.at < to) {
        let control = seen.table.as_deref().is_some_and(|t| t.ends_with("-KclHostControl"));
        let progress = seen.table.as_deref().is_some_and(|t| t.ends_with("-KclHostProgress"));
        let rows = if control {
            &control_rows
        } else if progress {
            &progress_rows
        } else {
            &lease_rows
        };
        match seen.operation.as_str() {
            "UpdateItem" | "PutItem" | "DeleteItem" => units.write += write_units(rows) / minutes,
            "Scan" => units.read += scan_units(rows, control) / minutes,
            "GetItem" => units.read += 1.0 / minutes,
            _ => {}
        }
        let table = if control {
            "control"
        } else if progress {
            "progress"
        } else {
            "lease"
        };
        *per_minute.entry(format!("{table} {}", seen.operation)).or_default() += 1.0 / minutes;
    }
    Counted { units, lease_rows, control_rows, per_minute }
}

/// kcl-host's rhythm, modelled for `leases` leases on `workers` workers in
/// a settled fleet, with rows of the sizes counted.
fn kcl_host_model(leases: usize, workers: usize, heartbeat_leases: bool, lease_row: usize, control_row: usize) -> Units {
    let per_minute = |every: Duration| 60.0 / every.as_secs_f64();
    let rows: Vec<Heartbeat> = (0..workers).map(|i| Heartbeat::bare(format!("w{i:05}"), 1)).collect();
    let mut other = FleetWatch::new(format!("w{:05}", workers - 1), FAILOVER);
    other.observe(&rows, tokio::time::Instant::now());
    let watchers = workers.min(2);
    let reads = watchers as f64 * per_minute(poll_interval(FAILOVER)) + (workers - watchers) as f64 * per_minute(other.read_every());
    let lease_scan = scan_units(&vec![lease_row; leases], false);
    let control_scan = scan_units(&vec![control_row; workers], true);
    let beats = workers as f64 * per_minute(FAILOVER / 3);
    let renewals = if heartbeat_leases { 0.0 } else { leases as f64 * per_minute(FAILOVER / 3) };
    let passes = workers as f64 * per_minute(FAILOVER * SETTLED_PASS_EVERY);
    Units { read: reads * control_scan + passes * lease_scan, write: beats + renewals }
}

/// Java KCL 2.x at its defaults, on rows of `lease_row` bytes.
fn java_model(leases: usize, workers: usize, lease_row: usize) -> Units {
    let per_minute = |every: Duration| 60.0 / every.as_secs_f64();
    let renewals = leases as f64 * per_minute(FAILOVER / 3 - Duration::from_millis(25));
    let scans = workers as f64 * per_minute(2 * (FAILOVER + Duration::from_millis(25)));
    Units { read: scans * scan_units(&vec![lease_row; leases], false), write: renewals }
}

fn line(size: &str, mode: &str, ours: Units, java: Units) {
    let (us, them) = (ours.dollars_a_month(), java.dollars_a_month());
    println!(
        "| {size} | {mode} | {:.0} R + {:.0} W | ${us:.2} | ${them:.2} | {:.1}% |",
        ours.read,
        ours.write,
        100.0 * us / them
    );
}

/// `cargo bench --bench bill [-- SIZE...]`: leases counted with two workers (8, 64, 1000), then the 10,000 model.
#[tokio::main]
async fn main() {
    let sizes: Vec<i32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![8, 64, 1000] } else { sizes };
    println!("| leases, workers | mode | units a minute | kcl-host a month | Java KCL 2.x a month | kcl-host / Java |");
    println!("|---|---|---|---|---|---|");
    let mut rows = (350, 300);
    for leases in sizes {
        for (renewal, heartbeat_leases) in [("auto", true), ("per-lease", false)] {
            let counted = count(leases, renewal).await;
            let lease_row = counted.lease_rows.iter().max().copied().unwrap_or(0);
            let control_row = counted.control_rows.iter().max().copied().unwrap_or(0);
            rows = (lease_row, control_row);
            let java = java_model(leases as usize, 2, lease_row);
            line(&format!("{leases}, 2 (counted)"), renewal, counted.units, java);
            let model = kcl_host_model(leases as usize, 2, heartbeat_leases, lease_row, control_row);
            line(&format!("{leases}, 2 (model)"), renewal, model, java);
            eprintln!("{leases} leases, {renewal}: requests a minute {:?}; rows up to {lease_row} B (lease), {control_row} B (control)", counted.per_minute);
        }
    }
    let (lease_row, control_row) = rows;
    for (mode, heartbeat_leases) in [("auto", true), ("per-lease", false)] {
        let model = kcl_host_model(10_000, 200, heartbeat_leases, lease_row, control_row);
        line("10,000, 200 (model)", mode, model, java_model(10_000, 200, lease_row));
    }
}
