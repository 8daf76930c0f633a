//! One shard's series: what its loop, processor and checkpoints did.

use std::sync::Arc;
use std::time::Duration;

use super::{ErrorLabels, Metrics, PolicyLabels, Reads, ShardLabels, VersionLabels, POLICY_ACTIONS};
use crate::runtime::CallError;

/// One shard's series.
#[derive(Clone)]
pub struct ShardMetrics {
    pub(super) metrics: Arc<Metrics>,
    pub(super) labels: ShardLabels,
    /// The shard's lease key, for its progress.
    pub(super) lease: String,
    /// The version series set last: a swap replaces it.
    pub(super) version: Arc<std::sync::Mutex<Option<VersionLabels>>>,
}

impl ShardMetrics {
    /// A batch of `records` records (`bytes` of data) acknowledged after `took`.
    pub fn processed(&self, records: usize, bytes: usize, took: Duration) {
        let m = &self.metrics;
        m.records.get_or_create(&self.labels).inc_by(records as u64);
        m.bytes.get_or_create(&self.labels).inc_by(bytes as u64);
        m.batches.get_or_create(&self.labels).inc();
        m.call_seconds.get_or_create(&self.labels).observe(took.as_secs_f64());
        m.progress.update(&self.lease, |p| p.records += records as u64);
    }

    /// How far the last batch was behind the tip.
    pub fn millis_behind_latest(&self, millis: u64) {
        self.metrics.millis_behind.get_or_create(&self.labels).set(millis as i64);
        self.metrics.progress.update(&self.lease, |p| p.millis_behind = Some(millis));
    }

    /// A processor call failed with `error`.
    pub fn guest_error(&self, error: &CallError) {
        let kind = match error {
            CallError::Retryable(_) => "retryable",
            CallError::Fatal(_) => "fatal",
            CallError::FailedAt { .. } => "failed-at",
            CallError::OutputsUnwritten(_) => "outputs",
            CallError::Uncommitted(_) => "uncommitted",
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

    /// The shard's stream is read from the source `label` (for `status` and the dashboard).
    pub fn source(&self, label: &str) {
        self.metrics.progress.update(&self.lease, |p| p.source = Some(label.to_owned()));
    }

    /// A window starting at `start_ms` is open now.
    pub fn window_opened(&self, start_ms: u64) {
        self.metrics.progress.update(&self.lease, |p| p.window_start_ms = Some(start_ms));
    }

    /// A window's close was committed.
    pub fn window_closed(&self) {
        self.metrics.windows_closed.get_or_create(&self.labels).inc();
        self.metrics.progress.update(&self.lease, |p| p.window_start_ms = None);
    }

    /// The failure policy did `action` once: `retry`, `bisect`, `dead-letter` or `skipped`.
    pub fn failure_event(&self, action: &'static str) {
        self.failure_events(action, 1);
    }

    /// The failure policy did `action` to `n` records.
    pub fn failure_events(&self, action: &'static str, n: usize) {
        self.metrics.policy.get_or_create(&PolicyLabels { stream: self.labels.stream.clone(), shard: self.labels.shard.clone(), action }).inc_by(n as u64);
        match action {
            "dead-letter" => self.metrics.progress.update(&self.lease, |p| p.dead_lettered += n as u64),
            "skipped" => self.metrics.progress.update(&self.lease, |p| p.skipped += n as u64),
            _ => {}
        }
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

    /// The GetRecords calls behind a batch.
    pub fn get_records(&self, reads: Reads) {
        self.metrics.get_records.get_or_create(&self.labels).inc_by(reads.calls);
        self.metrics.throttles.get_or_create(&self.labels).inc_by(reads.throttles);
        self.metrics.expired_iterators.get_or_create(&self.labels).inc_by(reads.expired);
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
        self.metrics.progress.running(&self.lease, processor);
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

    /// State keys read for the processor: `read` from the table, `cached` from memory.
    pub fn state_read(&self, read: usize, cached: usize) {
        self.metrics.state_reads.get_or_create(&self.labels).inc_by(read as u64);
        self.metrics.state_cache_hits.get_or_create(&self.labels).inc_by(cached as u64);
    }

    /// A checkpoint committed `items` state changes in `took`.
    pub fn state_committed(&self, items: usize, took: Duration) {
        let m = &self.metrics;
        m.state_writes.get_or_create(&self.labels).inc_by(items as u64);
        m.state_commit_seconds.get_or_create(&self.labels).observe(took.as_secs_f64());
        m.state_commit_items.get_or_create(&self.labels).observe(items as f64);
    }

    /// The shard's instance was replaced by a new version.
    pub fn swapped(&self) {
        self.metrics.swaps.get_or_create(&self.labels).inc();
    }

    /// The shard's lease is gone from this worker: its series go, now or,
    /// when metrics are published, after the next publish.
    pub fn forget(&self) {
        self.metrics.progress.forget(&self.lease);
        match self.metrics.forgotten.lock().expect("not poisoned").as_mut() {
            Some(forgotten) => forgotten.push(self.clone()),
            None => self.remove(),
        }
    }

    /// Removes every series of the shard.
    pub(super) fn remove(&self) {
        let m = &self.metrics;
        let counters = [&m.records, &m.bytes, &m.batches, &m.restarts, &m.checkpoints_written, &m.checkpoints_refused, &m.get_records, &m.throttles, &m.expired_iterators, &m.swaps];
        for family in counters.into_iter().chain([&m.state_reads, &m.state_cache_hits, &m.state_writes]) {
            family.remove(&self.labels);
        }
        m.state_commit_seconds.remove(&self.labels);
        m.state_commit_items.remove(&self.labels);
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
