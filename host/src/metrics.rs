//! The worker's Prometheus metrics. Every series carries the `application`
//! and `worker` labels; per-shard series also `stream` and `shard`, and go
//! away when this worker's lease on the shard does.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::runtime::CallError;

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
    policy: Family<PolicyLabels, Counter>,
    retry_attempts: Family<ShardLabels, Gauge>,
    checkpoints_written: Family<ShardLabels, Counter>,
    checkpoints_refused: Family<ShardLabels, Counter>,
    get_records: Family<ShardLabels, Counter>,
    throttles: Family<ShardLabels, Counter>,
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
            policy: Family::default(),
            retry_attempts: Family::default(),
            checkpoints_written: Family::default(),
            checkpoints_refused: Family::default(),
            get_records: Family::default(),
            throttles: Family::default(),
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
            output_write_seconds: Family::new_with_constructor(call_histogram),
            output_buffer: Gauge::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("records_processed", "Records delivered to the processor and acknowledged", metrics.records.clone());
        r.register("bytes_processed", "Bytes of record data acknowledged", metrics.bytes.clone());
        r.register("batches_processed", "Batches acknowledged", metrics.batches.clone());
        r.register("millis_behind_latest", "How far the last batch was behind the shard's tip", metrics.millis_behind.clone());
        r.register("process_records_seconds", "Duration of process-records calls", metrics.call_seconds.clone());
        r.register("guest_errors", "Failed processor calls by kind", metrics.guest_errors.clone());
        r.register("instance_restarts", "Processor instances restarted from the last checkpoint", metrics.restarts.clone());
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
        Metrics { registry, ..metrics }
    }

    /// The Prometheus text exposition of every series.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String");
        text
    }

    /// The series of one shard of `stream`.
    pub fn shard(self: &Arc<Self>, stream: &str, shard: &str) -> ShardMetrics {
        let labels = ShardLabels { stream: stream.to_owned(), shard: shard.to_owned() };
        ShardMetrics { metrics: self.clone(), labels, version: Default::default() }
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

/// One shard's series.
#[derive(Clone)]
pub struct ShardMetrics {
    metrics: Arc<Metrics>,
    labels: ShardLabels,
    /// The version series set last: a swap replaces it.
    version: Arc<std::sync::Mutex<Option<VersionLabels>>>,
}

impl ShardMetrics {
    /// A batch of `records` records (`bytes` of data) acknowledged after `took`.
    pub fn processed(&self, records: usize, bytes: usize, took: Duration) {
        let m = &self.metrics;
        m.records.get_or_create(&self.labels).inc_by(records as u64);
        m.bytes.get_or_create(&self.labels).inc_by(bytes as u64);
        m.batches.get_or_create(&self.labels).inc();
        m.call_seconds.get_or_create(&self.labels).observe(took.as_secs_f64());
    }

    /// How far the last batch was behind the tip.
    pub fn millis_behind_latest(&self, millis: u64) {
        self.metrics.millis_behind.get_or_create(&self.labels).set(millis as i64);
    }

    /// A processor call failed with `error`.
    pub fn guest_error(&self, error: &CallError) {
        let kind = match error {
            CallError::Retryable(_) => "retryable",
            CallError::Fatal(_) => "fatal",
            CallError::FailedAt { .. } => "failed-at",
            CallError::OutputsUnwritten(_) => "outputs",
            CallError::Trap(_) => "trap",
            CallError::DeadlineExceeded(_) => "deadline",
            CallError::MemoryLimit(_) => "memory",
            CallError::Withdrawn => "withdrawn",
        };
        self.metrics.guest_errors.get_or_create(&ErrorLabels { stream: self.labels.stream.clone(), shard: self.labels.shard.clone(), kind }).inc();
    }

    /// The shard's processor instance was restarted.
    pub fn restarted(&self) {
        self.metrics.restarts.get_or_create(&self.labels).inc();
    }

    /// The failure policy did `action` once: `retry`, `bisect`, `dead-letter` or `skipped`.
    pub fn failure_event(&self, action: &'static str) {
        self.failure_events(action, 1);
    }

    /// The failure policy did `action` to `n` records.
    pub fn failure_events(&self, action: &'static str, n: usize) {
        self.metrics.policy.get_or_create(&PolicyLabels { stream: self.labels.stream.clone(), shard: self.labels.shard.clone(), action }).inc_by(n as u64);
    }

    /// Failed calls on the records the shard retries now.
    pub fn retry_attempts(&self, attempts: u32) {
        self.metrics.retry_attempts.get_or_create(&self.labels).set(i64::from(attempts));
    }

    /// A checkpoint write happened; `written` when it succeeded.
    pub fn checkpoint(&self, written: bool) {
        let family = if written { &self.metrics.checkpoints_written } else { &self.metrics.checkpoints_refused };
        family.get_or_create(&self.labels).inc();
    }

    /// GetRecords calls for a batch, and how many were throttled.
    pub fn get_records(&self, calls: u64, throttles: u64) {
        self.metrics.get_records.get_or_create(&self.labels).inc_by(calls);
        self.metrics.throttles.get_or_create(&self.labels).inc_by(throttles);
    }

    /// The processor the shard runs now (replacing the one before): its
    /// hash, `name@version` if it has one, and contract version.
    pub fn version(&self, processor: &str, component: Option<&str>, contract: &'static str) {
        let labels = VersionLabels {
            stream: self.labels.stream.clone(),
            shard: self.labels.shard.clone(),
            processor: processor.to_owned(),
            component: component.unwrap_or_default().to_owned(),
            contract,
        };
        self.metrics.version.get_or_create(&labels).set(1);
        if let Some(previous) = self.version.lock().expect("not poisoned").replace(labels.clone())
            && previous != labels
        {
            self.metrics.version.remove(&previous);
        }
    }

    /// With `--parallelism`: calls running on the shard now, and how many
    /// more records its busiest instance has queued than its least busy.
    pub fn lanes(&self, in_flight: usize, spread: usize) {
        self.metrics.calls_in_flight.get_or_create(&self.labels).set(in_flight as i64);
        self.metrics.lane_spread.get_or_create(&self.labels).set(spread as i64);
    }

    /// The shard's instance was replaced by a new version.
    pub fn swapped(&self) {
        self.metrics.swaps.get_or_create(&self.labels).inc();
    }

    /// Removes every series of the shard: its lease is gone from this worker.
    pub fn forget(&self) {
        let m = &self.metrics;
        for family in [&m.records, &m.bytes, &m.batches, &m.restarts, &m.checkpoints_written, &m.checkpoints_refused, &m.get_records, &m.throttles, &m.swaps] {
            family.remove(&self.labels);
        }
        m.millis_behind.remove(&self.labels);
        m.calls_in_flight.remove(&self.labels);
        m.lane_spread.remove(&self.labels);
        m.retry_attempts.remove(&self.labels);
        for action in POLICY_ACTIONS {
            m.policy.remove(&PolicyLabels { stream: self.labels.stream.clone(), shard: self.labels.shard.clone(), action });
        }
        m.call_seconds.remove(&self.labels);
        for kind in ["retryable", "fatal", "failed-at", "outputs", "trap", "deadline", "memory", "withdrawn"] {
            m.guest_errors.remove(&ErrorLabels { stream: self.labels.stream.clone(), shard: self.labels.shard.clone(), kind });
        }
        if let Some(version) = self.version.lock().expect("not poisoned").take() {
            m.version.remove(&version);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_series_goes_away_when_forgotten() {
        let metrics = Arc::new(Metrics::new("orders-app", "w1"));
        let shard = metrics.shard("orders", "shardId-000000000001");
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
}
