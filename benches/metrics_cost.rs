//! What `--metrics cloudwatch` and `--metrics emf` cost a month: one worker
//! holding 8, 32 and 1,000 shards, each processing a batch a second, read
//! over a steady minute (after the minute its leases were taken) through
//! the same registry, KCL mapping and EMF writer the worker publishes with.
//! At list prices: $0.30 per metric-month, $0.01 per 1,000 PutMetricData
//! requests, $0.50 per GB of log data ingested (EMF).
//!
//! Run with `cargo bench -p kcl-host --bench metrics_cost`; figures go in
//! docs/BENCHMARKS.md beside the Java KCL's, measured from outside.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use kcl_host::metrics::kcl::{self, Level, Selection, DIMENSIONS};
use kcl_host::metrics::{emf, snapshot, Metrics, Reads};

const MINUTES_A_MONTH: f64 = 43_200.0;
const VALUES_PER_CALL: usize = 1000;

/// Every shard's minute: 60 batches of 100 records of 1 KiB, a checkpoint
/// each, 60 GetRecords calls.
fn a_minute(metrics: &Arc<Metrics>, shards: &[kcl_host::metrics::ShardMetrics]) {
    for shard in shards {
        for _ in 0..60 {
            shard.processed(100, 100 * 1024, Duration::from_millis(3));
            shard.checkpoint(true);
        }
        shard.get_records(Reads { calls: 60, throttles: 0, expired: 0 });
        shard.millis_behind_latest(250);
    }
    metrics.leases_held(shards.len());
}

fn main() {
    println!("| shards | level | metrics | values a minute | PutMetricData calls a minute | CloudWatch $/month | EMF bytes a minute | EMF $/month (metrics + ingestion) |");
    println!("|---|---|---|---|---|---|---|---|");
    for count in [8, 32, 1000] {
        let all: Vec<String> = DIMENSIONS.iter().map(|d| d.to_string()).collect();
        let no_shard_id = vec!["WorkerIdentifier".to_owned()];
        for (level, dimensions) in [(Level::Summary, &all), (Level::Detailed, &all), (Level::Detailed, &no_shard_id)] {
            let metrics = Arc::new(Metrics::new("orders-app", "worker-1"));
            let shards: Vec<_> = (0..count).map(|i| metrics.shard("orders", &format!("shardId-{i:012}").into())).collect();
            // The first minute takes the leases; the steady minute after it is priced.
            (0..count).for_each(|_| metrics.lease_taken(false));
            a_minute(&metrics, &shards);
            let (before, _) = snapshot::read(&metrics.encode());
            a_minute(&metrics, &shards);
            let (after, kinds) = snapshot::read(&metrics.encode());
            let selection = Selection { level, dimensions: dimensions.clone(), stream_ids: Default::default() };
            let shown = if dimensions.len() == 1 { format!("{level:?}, no ShardId") } else { format!("{level:?}") };
            let data = kcl::data(&before, &after, &kinds, &selection);
            // In a steady minute each value is a metric of its own.
            let values = data.len();
            let calls = values.div_ceil(VALUES_PER_CALL);
            let metric_dollars = values as f64 * 0.30;
            let cloudwatch = metric_dollars + calls as f64 * MINUTES_A_MONTH / 1000.0 * 0.01;
            let emf_bytes: usize = emf::lines("orders-app", &data, UNIX_EPOCH).iter().map(|l| l.len() + 1).sum();
            let emf = metric_dollars + emf_bytes as f64 * MINUTES_A_MONTH / 1e9 * 0.50;
            println!("| {count} | {shown} | {values} | {values} | {calls} | ${cloudwatch:.2} | {emf_bytes} | ${emf:.2} (API calls $0) |");
        }
    }
}
