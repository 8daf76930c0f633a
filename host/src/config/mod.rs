//! Settings for `kcl-host run`: flags, `KCL_HOST_*` environment variables, a
//! TOML file, then defaults, in that order. Names follow the Java KCL's
//! where it has one.
//!
//! ```toml
//! # kcl-host.toml
//! stream = "orders"                 # or a list: streams = ["orders", { name = "refunds", initial_position = "LATEST" }]
//!                                    # or dynamodb_table = "orders": the table's change stream
//! needs_images = "new-and-old"       # a DynamoDB stream must carry these images (new, old, new-and-old)
//! application = "orders-totals"      # also the lease table's name
//! initial_position = "TRIM_HORIZON"  # or LATEST, or AT_TIMESTAMP with initial_timestamp
//! max_leases = 64                    # maxLeasesForWorker
//! max_leases_to_steal = 1            # maxLeasesToStealAtOneTime
//! lease_renewal = "auto"             # or "per-lease": a renewal write per lease, always
//! fleet_heartbeat_reads = 10         # a second, by all workers but the two watchers
//! failover_time = "10s"              # failoverTimeMillis
//! shard_sync_interval = "60s"        # shardSyncIntervalMillis
//! idle_time_between_reads = "1s"     # idleTimeBetweenReadsInMillis
//! max_records = 10000                # maxRecords; per call with parallelism > 1
//! parallelism = 1                    # instances per shard, in partition-key order (1 to 64)
//! window = "60s"                     # tumbling windows of arrival time (window.close); off by default
//! swap_canary_batches = 3            # hot swap: batches on one shard before the rest
//! swap_rollback_after = 3            # failures of a new version that roll it back
//! swap_buffer_mib = 256              # records kept (all shards) to deliver again after a swap
//! swap_canary_input = "sample.jsonl" # records every new version must replay first
//! watch = false                      # swap whenever the processor file changes
//! memory_limit_mib = 256             # per processor instance (per shard with parallelism > 1)
//! call_deadline = "30s"              # longest one processor call may run
//! max_instances = 1000               # processor instances at once (caps max_leases)
//! cache_dir = "/var/cache/kcl-host"  # compiled components
//! no_cache = false
//! metrics = ["emf"]                  # or "cloudwatch": KCL's metrics published besides /metrics
//! metrics_level = "DETAILED"         # metricsLevel: NONE, SUMMARY or DETAILED
//! metrics_dimensions = ["ShardId", "StreamId", "WorkerIdentifier"]  # metricsEnabledDimensions
//! metrics_buffer_time = "60s"        # metricsBufferTimeMillis
//! metrics_emf_file = "/var/log/kcl-host/metrics.log"  # EMF lines here instead of stdout
//! ```
//!
//! Durations are written with a unit: `500ms`, `10s`, `2m`, `1h`.

mod layer;
mod streams;
mod values;

use std::path::PathBuf;
use std::time::Duration;

use crate::aws::AwsSettings;
use crate::fetch::{FetchSettings, MAX_RECORDS_LIMIT};
use crate::lease::rules::TakeSettings;
use crate::runtime::RuntimeConfig;
use crate::failure::FailureSettings;
use crate::output::OutputSpec;
use crate::stream::StreamSpec;
pub use layer::{Layer, DEFAULT_OUTPUT_BUFFER_MIB};
pub use streams::StreamEntry;
pub use values::{duration, parse_duration};
use values::{check_application, default_worker_id, initial_position, positive};

/// A setting that cannot be used, named with how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file cannot be read or parsed.
    #[error("cannot read the config file `{path}`: {reason}")]
    #[allow(missing_docs)] // fields named in the message
    File { path: String, reason: String },
    /// A required setting is in no layer.
    #[error("`{setting}` is required: pass --{flag}, set KCL_HOST_{env}, or put `{setting} = ...` in the config file")]
    #[allow(missing_docs)] // fields named in the message
    Missing { setting: &'static str, flag: &'static str, env: &'static str },
    /// A setting's value cannot be used.
    #[error("`{setting}` = {value:?} is not valid: {reason}")]
    #[allow(missing_docs)] // fields named in the message
    Invalid { setting: &'static str, value: String, reason: String },
}

/// How shards are read (`retrievalSpecificConfig` in Java KCL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retrieval {
    /// GetRecords, shared by every consumer of the stream (the default).
    Polling,
    /// Enhanced fan-out: SubscribeToShard through a stream consumer named
    /// after the application, 2 MB/s per shard of its own.
    FanOut,
}

impl Retrieval {
    fn parse(value: Option<&str>) -> Result<Self, ConfigError> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("polling") => Ok(Retrieval::Polling),
            Some("fanout" | "fan-out") => Ok(Retrieval::FanOut),
            Some(other) => Err(ConfigError::Invalid {
                setting: "retrieval",
                value: other.to_owned(),
                reason: "use polling (GetRecords) or fanout (enhanced fan-out)".into(),
            }),
        }
    }
}

/// Everything a worker needs, resolved and checked.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The streams (Kinesis, or one DynamoDB stream), each with where its new shards start.
    pub streams: Vec<StreamSpec>,
    /// The streams were given as a list (`streams`, or `--stream` more
    /// than once): an empty lease table gets keys that name the stream.
    pub streams_listed: bool,
    /// The item images the processor reads from a DynamoDB stream
    /// (`--needs-images`), checked against its view type at start.
    pub needs_images: Option<crate::source::dynamodb::Images>,
    /// The application name; also the lease table's name.
    pub application: String,
    /// This worker's id: unique among the application's live workers.
    pub worker_id: String,
    /// Region, profile and endpoints.
    pub aws: AwsSettings,
    /// Lease taking: failover time, max leases, stealing.
    pub take: TakeSettings,
    /// Heartbeat reads a second the workers other than the watchers make
    /// between them ([`crate::lease::watch::FleetWatch`]).
    pub fleet_heartbeat_reads: u32,
    /// `shardSyncIntervalMillis` (default 60 s); a sync also runs at start
    /// and whenever a shard ends.
    pub shard_sync_interval: Duration,
    /// How GetRecords is paced.
    pub fetch: FetchSettings,
    /// Instances processing each shard side by side, records of one key by
    /// one instance in order ([`MAX_PARALLELISM`] at most).
    pub parallelism: usize,
    /// Tumbling windows' length (`--window`); none: no windows.
    pub window: Option<Duration>,
    /// How shards are read.
    pub retrieval: Retrieval,
    /// Where `/metrics` and `/healthz` are served; off when `None`.
    pub admin_listen: Option<std::net::SocketAddr>,
    /// Publishing to CloudWatch (`--metrics` and the `--metrics-*` settings).
    pub metrics: crate::metrics::publish::PublishSettings,
    /// How a new processor version is rolled out.
    pub swap: crate::swap::rollout::SwapSettings,
    /// Records every new version must replay without error first.
    pub swap_canary_input: Option<PathBuf>,
    /// Swap whenever the processor file changes.
    pub watch: bool,
    /// The sandbox of every processor instance.
    pub runtime: RuntimeConfig,
    /// The output targets processors may send to.
    pub outputs: Vec<OutputSpec>,
    /// Output bytes all shards may queue, together, before sends wait.
    pub output_buffer_bytes: usize,
    /// What happens to records the processor keeps failing on.
    pub failure: FailureSettings,
}

/// Most instances one shard may run (`--parallelism`).
pub const MAX_PARALLELISM: usize = 64;

impl WorkerConfig {
    /// Records each GetRecords call asks for: `max_records`, or with
    /// `parallelism` over 1 enough for a call of each instance (Kinesis
    /// gives at most 10,000).
    pub fn fetch_limit(&self) -> i32 {
        (self.fetch.max_records as usize * self.parallelism).min(MAX_RECORDS_LIMIT as usize) as i32
    }

    /// Resolves a merged layer into a checked config.
    pub fn resolve(layer: Layer) -> Result<Self, ConfigError> {
        let runtime = layer.runtime()?;
        let (outputs, output_buffer_bytes) = layer.outputs()?;
        let failure = layer.failure()?;
        let initial_position = initial_position(layer.initial_position.as_deref(), layer.initial_timestamp.as_deref())?;
        let (streams, streams_listed) = streams::resolve(&layer, &initial_position)?;
        let needs_images = streams::needs_images(&layer, &streams)?;
        let retrieval = match Retrieval::parse(layer.retrieval.as_deref())? {
            Retrieval::FanOut if streams.iter().any(|s| s.kind != crate::stream::StreamKind::Kinesis) => {
                return Err(ConfigError::Invalid {
                    setting: "retrieval",
                    value: "fanout".into(),
                    reason: "enhanced fan-out is Kinesis'; a DynamoDB stream is read with GetRecords (polling)".into(),
                });
            }
            retrieval => retrieval,
        };
        let metrics = layer.metrics()?;
        let application = layer
            .application
            .ok_or(ConfigError::Missing { setting: "application", flag: "application", env: "APPLICATION" })?;
        check_application(&application)?;
        let parallelism = layer.parallelism.unwrap_or(1);
        if !(1..=MAX_PARALLELISM).contains(&parallelism) || parallelism > runtime.max_instances as usize {
            return Err(ConfigError::Invalid {
                setting: "parallelism",
                value: parallelism.to_string(),
                reason: format!(
                    "a shard runs 1 to {MAX_PARALLELISM} instances, and no more than max_instances ({}) allows",
                    runtime.max_instances
                ),
            });
        }
        let window = layer.window.as_deref().map(|w| duration("window", Some(w), Duration::ZERO)).transpose()?;
        let defaults = TakeSettings::default();
        let take = TakeSettings {
            failover_time: duration("failover_time", layer.failover_time.as_deref(), defaults.failover_time)?,
            // Never more leases than processor instances: a lease without
            // its instances would be held and not processed.
            max_leases: positive("max_leases", layer.max_leases.unwrap_or(defaults.max_leases))?.min(runtime.max_instances as usize / parallelism),
            max_leases_to_steal: layer.max_leases_to_steal.unwrap_or(defaults.max_leases_to_steal),
            heartbeat_leases: match layer.lease_renewal.as_deref() {
                None | Some("auto") => true,
                Some("per-lease") => false,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        setting: "lease_renewal",
                        value: other.to_owned(),
                        reason: "use auto (the heartbeat renews the leases while only kcl-host workers own them) or per-lease".into(),
                    });
                }
            },
        };
        let fetch_defaults = FetchSettings::default();
        let max_records = layer.max_records.unwrap_or(fetch_defaults.max_records);
        if !(1..=MAX_RECORDS_LIMIT).contains(&max_records) {
            return Err(ConfigError::Invalid {
                setting: "max_records",
                value: max_records.to_string(),
                reason: format!("Kinesis returns 1 to {MAX_RECORDS_LIMIT} records per call"),
            });
        }
        Ok(Self {
            streams,
            streams_listed,
            needs_images,
            application,
            worker_id: layer.worker_id.unwrap_or_else(default_worker_id),
            aws: AwsSettings {
                region: layer.region,
                profile: layer.profile,
                kinesis_endpoint: layer.kinesis_endpoint,
                dynamodb_endpoint: layer.dynamodb_endpoint,
                attempt_timeout: None,
            },
            take,
            fleet_heartbeat_reads: positive(
                "fleet_heartbeat_reads",
                layer.fleet_heartbeat_reads.unwrap_or(crate::lease::watch::DEFAULT_FLEET_READS_PER_SECOND) as usize,
            )? as u32,
            shard_sync_interval: duration("shard_sync_interval", layer.shard_sync_interval.as_deref(), Duration::from_secs(60))?,
            fetch: FetchSettings {
                max_records,
                idle_time_between_reads: duration(
                    "idle_time_between_reads",
                    layer.idle_time_between_reads.as_deref(),
                    fetch_defaults.idle_time_between_reads,
                )?,
            },
            parallelism,
            window,
            retrieval,
            swap: {
                let defaults = crate::swap::rollout::SwapSettings::default();
                crate::swap::rollout::SwapSettings {
                    canary_batches: layer.swap_canary_batches.unwrap_or(defaults.canary_batches),
                    rollback_after: positive("swap_rollback_after", layer.swap_rollback_after.unwrap_or(defaults.rollback_after) as usize)? as u32,
                    buffer_bytes: match layer.swap_buffer_mib {
                        Some(mib) => mib.checked_mul(1 << 20).ok_or_else(|| ConfigError::Invalid {
                            setting: "swap_buffer_mib",
                            value: mib.to_string(),
                            reason: "too large to count in bytes; give it in MiB, such as 256".into(),
                        })?,
                        None => defaults.buffer_bytes,
                    },
                }
            },
            swap_canary_input: layer.swap_canary_input,
            watch: layer.watch.unwrap_or(false),
            admin_listen: match layer.admin_listen {
                Some(address) => Some(address.parse().map_err(|_| ConfigError::Invalid {
                    setting: "admin_listen",
                    value: address.clone(),
                    reason: "expected an address and port, such as 127.0.0.1:9090".into(),
                })?),
                None => None,
            },
            metrics,
            runtime,
            outputs,
            output_buffer_bytes,
            failure,
        })
    }
}

#[cfg(test)]
mod tests;
