//! The metrics in the Java KCL's names, dimensions and levels: what one
//! interval of the worker's series becomes in CloudWatch (through
//! `PutMetricData` or Embedded Metric Format).
//!
//! Each Prometheus family maps to a KCL metric (`records_processed` →
//! `RecordsProcessed` with `Operation=ProcessTask, ShardId`), to a kcl-host
//! one in the same style, or, by default (a family added later), to its
//! name in CamelCase per worker at DETAILED. Counters become what they grew
//! by in the interval, gauges their value, histograms a statistic set.
//! Only the core metrics are published when zero: every other one costs
//! nothing in the months it stays zero.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::snapshot::{Kind, Labels, Series, Value};

/// `--metrics-level`: KCL's `metricsLevel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing is published.
    None,
    /// The metrics an alarm or a KCL dashboard needs.
    Summary,
    /// Everything (KCL's default).
    Detailed,
}

impl Level {
    /// `NONE`, `SUMMARY` or `DETAILED`, in any case.
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_uppercase().as_str() {
            "NONE" => Some(Level::None),
            "SUMMARY" => Some(Level::Summary),
            "DETAILED" => Some(Level::Detailed),
            _ => None,
        }
    }
}

/// The dimensions KCL's `metricsEnabledDimensions` names. `Operation` is
/// always on, as in KCL.
pub const DIMENSIONS: [&str; 4] = ["Operation", "ShardId", "StreamId", "WorkerIdentifier"];

/// CloudWatch's units, as far as kcl-host's metrics need them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A count.
    Count,
    /// Bytes.
    Bytes,
    /// Milliseconds.
    Milliseconds,
}

impl Unit {
    /// The unit's name in CloudWatch.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Bytes => "Bytes",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// A metric's dimensions: (name, value), `Operation` first.
pub type Dimensions = Vec<(String, String)>;

/// One metric's values over an interval, as a CloudWatch statistic set.
#[derive(Clone, Debug, PartialEq)]
pub struct Datum {
    /// The metric's name, e.g. `RecordsProcessed`.
    pub name: String,
    /// Its unit.
    pub unit: Unit,
    /// Its dimensions, `Operation` first.
    pub dimensions: Dimensions,
    /// The values' count, sum, minimum and maximum.
    pub stats: Stats,
}

/// A statistic set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// How many values.
    pub count: f64,
    /// Their sum.
    pub sum: f64,
    /// The least.
    pub min: f64,
    /// The greatest.
    pub max: f64,
}

impl Stats {
    fn one(value: f64) -> Self {
        Stats { count: 1.0, sum: value, min: value, max: value }
    }

    fn merge(self, other: Stats) -> Stats {
        Stats { count: self.count + other.count, sum: self.sum + other.sum, min: self.min.min(other.min), max: self.max.max(other.max) }
    }
}

/// What a metric is counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Per {
    /// A shard: `ShardId`, and `StreamId` when the worker reads several streams.
    Shard,
    /// The worker: `WorkerIdentifier`.
    Worker,
    /// The application: `Operation` alone.
    Application,
}

/// How one family is published.
struct Rule {
    family: &'static str,
    /// Only the family's series with this label value (`failure_policy`'s actions).
    only: Option<(&'static str, &'static str)>,
    name: Cow<'static, str>,
    operation: &'static str,
    per: Per,
    unit: Unit,
    level: Level,
    /// Published when zero too.
    always: bool,
}

const fn rule(family: &'static str, name: &'static str, operation: &'static str, per: Per, unit: Unit, level: Level, always: bool) -> Rule {
    Rule { family, only: None, name: Cow::Borrowed(name), operation, per, unit, level, always }
}

const fn action(action: &'static str, name: &'static str, level: Level) -> Rule {
    let family = "failure_policy";
    Rule { family, only: Some(("action", action)), name: Cow::Borrowed(name), operation: "ProcessTask", per: Shard, unit: Count, level, always: false }
}

use Level::{Detailed, Summary};
use Per::{Application, Shard, Worker};
use Unit::{Bytes, Count, Milliseconds};

/// Every family's KCL name; docs/OPERATIONS.md lists them for dashboards.
#[rustfmt::skip]
const RULES: &[Rule] = &[
    // The Java KCL's own names.
    rule("records_processed", "RecordsProcessed", "ProcessTask", Shard, Count, Summary, true),
    rule("bytes_processed", "DataBytesProcessed", "ProcessTask", Shard, Bytes, Summary, true),
    rule("millis_behind_latest", "MillisBehindLatest", "ProcessTask", Shard, Milliseconds, Summary, true),
    rule("millis_behind_latest", "MillisBehindLatest", "ApplicationTracker", Application, Milliseconds, Summary, true),
    rule("process_records_seconds", "RecordProcessor.processRecords.Time", "ProcessTask", Shard, Milliseconds, Summary, true),
    rule("expired_iterators", "ExpiredIterator", "ProcessTask", Shard, Count, Summary, false),
    rule("leases_held", "CurrentLeases", "RenewAllLeases", Worker, Count, Summary, true),
    rule("leases_lost", "LostLeases", "RenewAllLeases", Worker, Count, Summary, false),
    rule("leases_taken", "TakenLeases", "TakeLeases", Worker, Count, Summary, false),
    // kcl-host's, in the same style.
    rule("guest_errors", "ProcessorErrors", "ProcessTask", Shard, Count, Summary, false),
    rule("retry_attempts", "RetryAttempts", "ProcessTask", Shard, Count, Summary, false),
    action("retry", "RetriedCalls", Detailed),
    action("bisect", "BisectedCalls", Detailed),
    action("dead-letter", "DeadLetterRecords", Summary),
    action("skipped", "SkippedRecords", Summary),
    rule("instance_restarts", "ProcessorRestarts", "ProcessTask", Shard, Count, Detailed, false),
    rule("get_records_throttles", "ReadProvisionedThroughputExceeded", "ProcessTask", Shard, Count, Detailed, false),
    rule("checkpoints_refused", "CheckpointsRefused", "Checkpoint", Shard, Count, Summary, false),
    rule("checkpoints_written", "CheckpointsWritten", "Checkpoint", Worker, Count, Detailed, true),
    rule("leases_stolen", "StolenLeases", "TakeLeases", Worker, Count, Detailed, false),
    rule("renewals_failed", "RenewLease.Failures", "RenewAllLeases", Worker, Count, Detailed, false),
    rule("processor_swaps", "ProcessorSwaps", "HotSwap", Worker, Count, Summary, false),
    rule("processor_rollbacks", "ProcessorRollbacks", "HotSwap", Worker, Count, Summary, false),
    rule("windows_closed", "WindowsClosed", "Window", Worker, Count, Detailed, false),
    rule("output_records", "OutputRecords", "Output", Worker, Count, Detailed, false),
    rule("output_bytes", "OutputBytes", "Output", Worker, Bytes, Detailed, false),
    rule("output_retries", "OutputRetries", "Output", Worker, Count, Detailed, false),
    rule("output_failures", "OutputFailures", "Output", Worker, Count, Summary, false),
    rule("output_write_seconds", "Output.Time", "Output", Worker, Milliseconds, Detailed, false),
    rule("output_buffer_bytes", "OutputBufferBytes", "Output", Worker, Bytes, Detailed, false),
    rule("state_reads", "StateReads", "State", Worker, Count, Detailed, false),
    rule("state_cache_hits", "StateCacheHits", "State", Worker, Count, Detailed, false),
    rule("state_writes", "StateWrites", "State", Worker, Count, Detailed, false),
    rule("state_commit_seconds", "StateCommit.Time", "State", Worker, Milliseconds, Detailed, false),
    rule("state_commit_items", "StateCommitItems", "State", Worker, Count, Detailed, false),
    rule("swap_buffer_bytes", "SwapBufferBytes", "HotSwap", Worker, Bytes, Detailed, false),
];

/// Families only Prometheus shows: each would be a CloudWatch metric per
/// shard every minute, for what `RecordsProcessed` already says or a label
/// CloudWatch cannot carry (the processor's version).
const PROMETHEUS_ONLY: [&str; 5] = ["processor_version", "calls_in_flight", "parallel_lag_records", "batches_processed", "get_records_calls"];

/// Which metrics, with which dimensions, a worker publishes.
#[derive(Clone, Debug)]
pub struct Selection {
    /// `--metrics-level`.
    pub level: Level,
    /// `--metrics-dimensions` (`Operation` is always on).
    pub dimensions: Vec<String>,
    /// With multi-stream lease keys: each stream's name and its identifier
    /// as Java KCL serializes it (`account:name:creationEpoch`), which
    /// per-shard metrics carry as `StreamId`.
    pub stream_ids: BTreeMap<String, String>,
}

impl Selection {
    fn enabled(&self, dimension: &str) -> bool {
        dimension == "Operation" || self.dimensions.iter().any(|d| d == dimension)
    }
}

/// What the series did between `before` and `now`, as CloudWatch data.
pub fn data(before: &Series, now: &Series, kinds: &BTreeMap<String, Kind>, selection: &Selection) -> Vec<Datum> {
    let mut merged: BTreeMap<(String, Dimensions), (Unit, Stats)> = BTreeMap::new();
    for ((family, labels), value) in now {
        if PROMETHEUS_ONLY.contains(&family.as_str()) {
            continue;
        }
        let fallback;
        let rules: Vec<&Rule> = match RULES.iter().filter(|r| r.family == family).collect::<Vec<_>>() {
            rules if rules.is_empty() => {
                fallback = default_rule(family, kinds.get(family).copied());
                vec![&fallback]
            }
            rules => rules,
        };
        let Some(stats) = change(before.get(&(family.clone(), labels.clone())), value, kinds.get(family).copied()) else { continue };
        for rule in rules {
            if rule.level > selection.level || rule.only.is_some_and(|(label, wanted)| labels.get(label).map(String::as_str) != Some(wanted)) {
                continue;
            }
            let stats = if matches!(value, Value::Histogram { .. }) && rule.unit == Milliseconds { scaled(stats, 1000.0) } else { stats };
            if !rule.always && stats.sum == 0.0 && stats.max == 0.0 {
                continue;
            }
            let key = (rule.name.to_string(), dimensions(rule, labels, selection));
            merged.entry(key).and_modify(|(_, s)| *s = s.merge(stats)).or_insert((rule.unit, stats));
        }
    }
    merged.into_iter().map(|((name, dimensions), (unit, stats))| Datum { name, unit, dimensions, stats }).collect()
}

/// A family without a rule: its CamelCase name per worker, at DETAILED.
fn default_rule(family: &str, kind: Option<Kind>) -> Rule {
    let camel: String = family.split('_').map(|word| word[..1].to_ascii_uppercase() + &word[1..]).collect();
    let unit = if kind == Some(Kind::Histogram) && family.ends_with("_seconds") { Milliseconds } else { Count };
    Rule { family: "", only: None, name: Cow::Owned(camel), operation: "KclHost", per: Worker, unit, level: Detailed, always: false }
}

/// The dimensions of `rule`'s metric for a series with `labels`.
fn dimensions(rule: &Rule, labels: &Labels, selection: &Selection) -> Dimensions {
    let mut dimensions = vec![("Operation".to_owned(), rule.operation.to_owned())];
    let mut add = |name: &str, value: Option<&String>| {
        if let Some(value) = value.filter(|_| selection.enabled(name)) {
            dimensions.push((name.to_owned(), value.clone()));
        }
    };
    match rule.per {
        Shard => {
            add("StreamId", labels.get("stream").and_then(|stream| selection.stream_ids.get(stream)));
            add("ShardId", labels.get("shard"));
        }
        Worker => add("WorkerIdentifier", labels.get("worker")),
        Application => {}
    }
    // An output's target is a dimension of its own: always on, as Operation.
    if let Some(target) = labels.get("target") {
        dimensions.push(("Target".to_owned(), target.clone()));
    }
    dimensions
}

/// A series' change since `before`: what a counter grew by (all of it when
/// the series is new or was reset), a gauge's value, a histogram's new
/// observations. None when a histogram saw nothing.
fn change(before: Option<&Value>, now: &Value, kind: Option<Kind>) -> Option<Stats> {
    match (now, before) {
        (Value::Number(now), _) if kind == Some(Kind::Gauge) => Some(Stats::one(*now)),
        (Value::Number(now), Some(Value::Number(before))) if now >= before => Some(Stats::one(now - before)),
        (Value::Number(now), _) => Some(Stats::one(*now)),
        (Value::Histogram { sum, count, buckets }, before) => {
            let (sum0, count0, buckets0) = match before {
                Some(Value::Histogram { sum: sum0, count: count0, buckets: buckets0 }) if count0 <= count && buckets0.len() == buckets.len() => {
                    (*sum0, *count0, buckets0.as_slice())
                }
                _ => (0.0, 0.0, &[][..]),
            };
            let observations = count - count0;
            (observations > 0.0).then(|| histogram_stats(sum - sum0, observations, buckets, buckets0))
        }
    }
}

/// The statistic set of `count` new observations summing to `sum`:
/// minimum and maximum are the bounds of the buckets they fell in (the
/// largest finite bound for the last), kept around the average.
fn histogram_stats(sum: f64, count: f64, buckets: &[(f64, f64)], before: &[(f64, f64)]) -> Stats {
    let (mut lower, mut below, mut min, mut max) = (0.0, 0.0, None, 0.0);
    for (i, &(bound, cumulative)) in buckets.iter().enumerate() {
        // New observations at or below `bound`.
        let upto = cumulative - before.get(i).map_or(0.0, |b| b.1);
        if upto > below {
            min.get_or_insert(lower);
            max = if bound.is_finite() { bound } else { lower };
        }
        (lower, below) = (bound, upto);
    }
    let average = sum / count;
    Stats { count, sum, min: min.unwrap_or(average).min(average), max: f64::max(max, average) }
}

fn scaled(stats: Stats, by: f64) -> Stats {
    Stats { count: stats.count, sum: stats.sum * by, min: stats.min * by, max: stats.max * by }
}

#[cfg(test)]
mod tests;
