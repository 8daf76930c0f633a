//! The worker's metrics, recorded once, in a Prometheus registry: scraped
//! at the admin listener's `/metrics`, and read from there by the
//! CloudWatch and EMF sinks ([`publish`]) in the Java KCL's names
//! ([`kcl`]). Every series carries the `application` and `worker` labels;
//! per-shard series also `stream` and `shard`, and go away when this
//! worker's lease on the shard does (after the next publish, when there is
//! one, so that it counts the shard's last records).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::lease::LeaseKey;

mod cloudwatch;
pub mod emf;
pub mod kcl;
pub mod progress;
pub mod publish;
mod shard;
pub mod snapshot;

pub use shard::ShardMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    stream: String,
    shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    stream: String,
    shard: String,
    /// retryable, fatal, trap, deadline, memory, withdrawn.
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    stream: String,
    shard: String,
    /// retry, bisect (calls); dead-letter, skipped (records).
    action: &'static str,
}

/// The failure policy's actions, as [`ShardMetrics::failure_event`] counts them.
const POLICY_ACTIONS: [&str; 4] = ["retry", "bisect", "dead-letter", "skipped"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    stream: String,
    shard: String,
    /// Short SHA-256 of the component.
    processor: String,
    /// `name@version` from the component's metadata; empty when it has none.
    component: String,
    /// The `kcl:processor` contract version it implements.
    contract: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    /// The output's declared name.
    target: String,
}

type Histograms = Family<ShardLabels, Histogram, fn() -> Histogram>;

/// The GetRecords calls behind one batch, as a shard's reader counts them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// Calls made.
    pub calls: u64,
    /// How many of them were throttled.
    pub throttles: u64,
    /// How many found their iterator expired (KCL's `ExpiredIterator`).
    pub expired: u64,
}

/// Shards forgotten since the last publish, their series still kept.
pub struct Forgotten(Vec<ShardMetrics>);

impl Forgotten {
    /// Removes their series: the publisher has read them.
    pub fn remove(self) {
        for shard in self.0 {
            shard.remove();
        }
    }
}

/// Every metric of one worker.
pub struct Metrics {
    registry: Registry,
    records: Family<ShardLabels, Counter>,
    bytes: Family<ShardLabels, Counter>,
    batches: Family<ShardLabels, Counter>,
    millis_behind: Family<ShardLabels, Gauge>,
    call_seconds: Histograms,
    guest_errors: Family<ErrorLabels, Counter>,
    restarts: Family<ShardLabels, Counter>,
    windows_closed: Family<ShardLabels, Counter>,
    policy: Family<PolicyLabels, Counter>,
    retry_attempts: Family<ShardLabels, Gauge>,
    checkpoints_written: Family<ShardLabels, Counter>,
    checkpoints_refused: Family<ShardLabels, Counter>,
    get_records: Family<ShardLabels, Counter>,
    throttles: Family<ShardLabels, Counter>,
    expired_iterators: Family<ShardLabels, Counter>,
    version: Family<VersionLabels, Gauge>,
    swaps: Family<ShardLabels, Counter>,
    calls_in_flight: Family<ShardLabels, Gauge>,
    lane_spread: Family<ShardLabels, Gauge>,
    rollbacks: Counter,
    swap_buffer: Gauge,
    leases_held: Gauge,
    leases_taken: Counter,
    leases_stolen: Counter,
    leases_lost: Counter,
    renewals_failed: Counter,
    output_records: Family<TargetLabels, Counter>,
    output_bytes: Family<TargetLabels, Counter>,
    output_retries: Family<TargetLabels, Counter>,
    output_failures: Family<TargetLabels, Counter>,
    output_write_seconds: Family<TargetLabels, Histogram, fn() -> Histogram>,
    output_buffer: Gauge,
    state_reads: Family<ShardLabels, Counter>,
    state_cache_hits: Family<ShardLabels, Counter>,
    state_writes: Family<ShardLabels, Counter>,
    state_commit_seconds: Histograms,
    state_commit_items: Histograms,
    /// 1 per stream, labelled with its source (kinesis, dynamodb-streams).
    stream_source: Family<Vec<(&'static str, String)>, Gauge>,
    /// Each shard's progress, for the worker's progress row.
    progress: Arc<progress::ProgressBoard>,
    /// Shards forgotten since the last publish, whose series it still reads;
    /// `None` when nothing publishes (they go at once).
    forgotten: std::sync::Mutex<Option<Vec<ShardMetrics>>>,
}

/// Items in one state commit: 1 to 128.
fn items_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 8))
}

fn call_histogram() -> Histogram {
    // 0.1 ms to ~27 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

impl Metrics {
    /// Metrics of the worker `worker` of `application`.
    pub fn new(application: &str, worker: &str) -> Self {
        let labels = [("application".into(), application.to_owned().into()), ("worker".into(), worker.to_owned().into())];
        let mut registry = Registry::with_prefix_and_labels("kcl_host", labels.into_iter());
        let metrics = Metrics {
            records: Family::default(),
            bytes: Family::default(),
            batches: Family::default(),
            millis_behind: Family::default(),
            call_seconds: Family::new_with_constructor(call_histogram),
            guest_errors: Family::default(),
            restarts: Family::default(),
            windows_closed: Family::default(),
            policy: Family::default(),
            retry_attempts: Family::default(),
            checkpoints_written: Family::default(),
            checkpoints_refused: Family::default(),
            get_records: Family::default(),
            throttles: Family::default(),
            expired_iterators: Family::default(),
            version: Family::default(),
            swaps: Family::default(),
            calls_in_flight: Family::default(),
            lane_spread: Family::default(),
            rollbacks: Counter::default(),
            swap_buffer: Gauge::default(),
            leases_held: Gauge::default(),
            leases_taken: Counter::default(),
            leases_stolen: Counter::default(),
            leases_lost: Counter::default(),
            renewals_failed: Counter::default(),
            output_records: Family::default(),
            output_bytes: Family::default(),
            output_retries: Family::default(),
            output_failures: Family::default(),
            state_reads: Family::default(),
            state_cache_hits: Family::default(),
            state_writes: Family::default(),
            state_commit_seconds: Family::new_with_constructor(call_histogram),
            state_commit_items: Family::new_with_constructor(items_histogram),
            output_write_seconds: Family::new_with_constructor(call_histogram),
            output_buffer: Gauge::default(),
            stream_source: Family::default(),
            progress: Arc::default(),
            forgotten: std::sync::Mutex::new(None),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("build", "The kcl-host build this worker runs", prometheus_client::metrics::info::Info::new(vec![("version", crate::version())]));
        r.register("stream_source", "1 for each stream, labelled with the source it is read from", metrics.stream_source.clone());
        r.register("records_processed", "Records delivered to the processor and acknowledged", metrics.records.clone());
        r.register("bytes_processed", "Bytes of record data acknowledged", metrics.bytes.clone());
        r.register("batches_processed", "Batches acknowledged", metrics.batches.clone());
        r.register("millis_behind_latest", "How far the last batch was behind the shard's tip", metrics.millis_behind.clone());
        r.register("process_records_seconds", "Duration of process-records calls", metrics.call_seconds.clone());
        r.register("guest_errors", "Failed processor calls by kind", metrics.guest_errors.clone());
        r.register("instance_restarts", "Processor instances restarted from the last checkpoint", metrics.restarts.clone());
        r.register("windows_closed", "Tumbling windows closed and committed (--window)", metrics.windows_closed.clone());
        r.register(
            "failure_policy",
            "What the failure policy did: calls retried or bisected, records sent to --on-failure (dead-letter) or skipped",
            metrics.policy.clone(),
        );
        r.register("retry_attempts", "Failed calls on the records a shard is retrying now (0 when none is failing)", metrics.retry_attempts.clone());
        r.register("checkpoints_written", "Checkpoints written to the lease table", metrics.checkpoints_written.clone());
        r.register("checkpoints_refused", "Checkpoints refused (lease lost, invalid, table unavailable)", metrics.checkpoints_refused.clone());
        r.register("get_records_calls", "GetRecords calls", metrics.get_records.clone());
        r.register("get_records_throttles", "GetRecords calls throttled", metrics.throttles.clone());
        r.register("expired_iterators", "GetRecords calls whose shard iterator had expired (a new one was asked for)", metrics.expired_iterators.clone());
        r.register("processor_version", "1 for the processor each shard runs", metrics.version.clone());
        r.register("processor_swaps", "Processor instances replaced by a new version at a batch boundary", metrics.swaps.clone());
        r.register("calls_in_flight", "Processor calls running on a shard now (up to --parallelism)", metrics.calls_in_flight.clone());
        r.register(
            "parallel_lag_records",
            "With --parallelism: records queued for the shard's busiest instance beyond its least busy one",
            metrics.lane_spread.clone(),
        );
        r.register("swap_buffer_bytes", "Record data kept, all shards together, to deliver again after a swap", metrics.swap_buffer.clone());
        r.register("processor_rollbacks", "New versions rolled back on every shard after failing on probation", metrics.rollbacks.clone());
        r.register("leases_held", "Leases this worker holds", metrics.leases_held.clone());
        r.register("leases_taken", "Leases taken (free, expired or stolen)", metrics.leases_taken.clone());
        r.register("leases_stolen", "Leases stolen to balance the load", metrics.leases_stolen.clone());
        r.register("leases_lost", "Leases lost to another worker or to a missed renewal", metrics.leases_lost.clone());
        r.register("renewals_failed", "Lease renewals that failed (the lease may still be valid)", metrics.renewals_failed.clone());
        r.register("output_records", "Records written to each output target and acknowledged", metrics.output_records.clone());
        r.register("output_bytes", "Bytes of data written to each output target", metrics.output_bytes.clone());
        r.register("output_retries", "Requests or records sent again to each output target", metrics.output_retries.clone());
        r.register("output_failures", "Flushes that failed because a target kept failing", metrics.output_failures.clone());
        r.register("output_write_seconds", "Time to write a shard's queued outputs to a target, retries included", metrics.output_write_seconds.clone());
        r.register("output_buffer_bytes", "Output bytes queued, all shards together, not yet acknowledged", metrics.output_buffer.clone());
        r.register("state_reads", "State keys read from the state table (cache misses)", metrics.state_reads.clone());
        r.register("state_cache_hits", "State keys read from an instance's cache or its own changes", metrics.state_cache_hits.clone());
        r.register("state_writes", "State keys committed with a checkpoint (set or deleted)", metrics.state_writes.clone());
        r.register("state_commit_seconds", "Duration of a checkpoint's transaction with its state changes", metrics.state_commit_seconds.clone());
        r.register("state_commit_items", "State items in one checkpoint's transaction", metrics.state_commit_items.clone());
        Metrics { registry, ..metrics }
    }

    /// The Prometheus text exposition of every series.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String");
        text
    }

    /// `stream` is read from the source `label`.
    pub fn stream_source(&self, stream: &str, label: &str) {
        self.stream_source.get_or_create(&vec![("stream", stream.to_owned()), ("source", label.to_owned())]).set(1);
    }

    /// The series of the shard of `stream` leased as `key`.
    pub fn shard(self: &Arc<Self>, stream: &str, key: &LeaseKey) -> ShardMetrics {
        let labels = ShardLabels { stream: stream.to_owned(), shard: key.shard_id().to_owned() };
        // Held again before the publish dropped it: its series stay.
        if let Some(forgotten) = self.forgotten.lock().expect("not poisoned").as_mut() {
            forgotten.retain(|shard| shard.labels != labels);
        }
        ShardMetrics { metrics: self.clone(), labels, lease: key.to_string(), version: Default::default() }
    }

    /// From now on a forgotten shard's series stay until
    /// [`Forgotten::remove`]: a publisher reads them once more.
    pub fn keep_forgotten_series(&self) {
        self.forgotten.lock().expect("not poisoned").get_or_insert_with(Vec::new);
    }

    /// The shards forgotten since the last call, for the publisher to
    /// remove once it has read them. Taken before the reading, so a shard
    /// forgotten during it waits for the next one.
    pub fn forgotten_series(&self) -> Forgotten {
        Forgotten(self.forgotten.lock().expect("not poisoned").as_mut().map(std::mem::take).unwrap_or_default())
    }

    /// Each shard's progress, as the worker's progress row reports it.
    pub fn progress(&self) -> Arc<progress::ProgressBoard> {
        self.progress.clone()
    }

    /// The worker holds `count` leases.
    pub fn leases_held(&self, count: usize) {
        self.leases_held.set(count as i64);
    }

    /// A take pass took a lease; `stolen` when from a live worker.
    pub fn lease_taken(&self, stolen: bool) {
        self.leases_taken.inc();
        if stolen {
            self.leases_stolen.inc();
        }
    }

    /// A lease was lost.
    pub fn lease_lost(&self) {
        self.leases_lost.inc();
    }

    /// A renewal write failed.
    pub fn renewal_failed(&self) {
        self.renewals_failed.inc();
    }

    /// Bytes kept for re-delivery after a swap.
    pub fn swap_buffer(&self, bytes: usize) {
        self.swap_buffer.set(bytes as i64);
    }

    /// A write of `records` (`bytes` of data) to the output `target` went
    /// as `ok` says, after `took`, with `retries`.
    pub fn output_written(&self, target: &str, records: usize, bytes: usize, retries: u64, ok: bool, took: Duration) {
        let labels = TargetLabels { target: target.to_owned() };
        if ok {
            self.output_records.get_or_create(&labels).inc_by(records as u64);
            self.output_bytes.get_or_create(&labels).inc_by(bytes as u64);
        } else {
            self.output_failures.get_or_create(&labels).inc();
        }
        self.output_retries.get_or_create(&labels).inc_by(retries);
        self.output_write_seconds.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// Output bytes queued, all shards together.
    pub fn output_buffer(&self, bytes: usize) {
        self.output_buffer.set(bytes as i64);
    }

    /// A rollout was rolled back.
    pub fn rolled_back(&self) {
        self.rollbacks.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_series_goes_away_when_forgotten() {
        let metrics = Arc::new(Metrics::new("orders-app", "w1"));
        let shard = metrics.shard("orders", &"shardId-000000000001".into());
        shard.processed(3, 30, Duration::from_millis(2));
        shard.version("abc123", None, "0.2.0");
        metrics.leases_held(1);
        let text = metrics.encode();
        assert!(text.contains(r#"kcl_host_records_processed_total{application="orders-app",worker="w1",stream="orders",shard="shardId-000000000001"} 3"#), "{text}");
        assert!(text.contains(r#"kcl_host_leases_held{application="orders-app",worker="w1"} 1"#), "{text}");
        shard.version("def456", Some("counter@2.0.0"), "0.2.0");
        shard.swapped();
        metrics.rolled_back();
        let text = metrics.encode();
        assert!(text.contains(r#"processor="def456",component="counter@2.0.0""#) && !text.contains("abc123"), "a swap replaces the version: {text}");
        assert!(text.contains(r#"kcl_host_processor_swaps_total{application="orders-app",worker="w1",stream="orders",shard="shardId-000000000001"} 1"#), "{text}");
        assert!(text.contains(r#"kcl_host_processor_rollbacks_total{application="orders-app",worker="w1"} 1"#), "{text}");
        shard.forget();
        let text = metrics.encode();
        assert!(!text.contains("shardId-000000000001"), "{text}");
    }

    #[test]
    fn with_a_publisher_a_forgotten_shard_is_read_once_more() {
        let metrics = Arc::new(Metrics::new("orders-app", "w1"));
        metrics.keep_forgotten_series();
        let (ended, held_again) = (metrics.shard("orders", &"shardId-1".into()), metrics.shard("orders", &"shardId-2".into()));
        ended.processed(3, 30, Duration::from_millis(2));
        held_again.processed(4, 40, Duration::from_millis(2));
        ended.forget();
        held_again.forget();
        let held_again = metrics.shard("orders", &"shardId-2".into());
        assert!(metrics.encode().contains("shardId-1"), "the publisher has not read its last records yet");
        metrics.forgotten_series().remove();
        let text = metrics.encode();
        assert!(!text.contains("shardId-1\""), "{text}");
        held_again.processed(1, 10, Duration::from_millis(2));
        assert!(text.contains(r#"shard="shardId-2"} 4"#), "a shard held again keeps its series: {text}");
    }
}
