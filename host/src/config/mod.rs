//! Settings for `kcl-host run`: flags, `KCL_HOST_*` environment variables, a
//! TOML file, then defaults, in that order. Names follow the Java KCL's
//! where it has one.
//!
//! ```toml
//! # kcl-host.toml
//! stream = "orders"
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
//! swap_canary_batches = 3            # hot swap: batches on one shard before the rest
//! swap_rollback_after = 3            # failures of a new version that roll it back
//! swap_buffer_mib = 256              # records kept (all shards) to deliver again after a swap
//! swap_canary_input = "sample.jsonl" # records every new version must replay first
//! watch = false                      # swap whenever the processor file changes
//! memory_limit_mib = 256             # per processor instance
//! call_deadline = "30s"              # longest one processor call may run
//! max_instances = 1000               # processor instances at once (caps max_leases)
//! cache_dir = "/var/cache/kcl-host"  # compiled components
//! no_cache = false
//! ```
//!
//! Durations are written with a unit: `500ms`, `10s`, `2m`, `1h`.

mod layer;
mod values;

use std::path::PathBuf;
use std::time::Duration;

use crate::aws::AwsSettings;
use crate::fetch::{FetchSettings, MAX_RECORDS_LIMIT};
use crate::lease::rules::TakeSettings;
use crate::runtime::RuntimeConfig;
use crate::failure::FailureSettings;
use crate::output::OutputSpec;
use crate::shard::InitialPosition;
pub use layer::{Layer, DEFAULT_OUTPUT_BUFFER_MIB};
pub use values::{duration, parse_duration};
use values::{check_application, default_worker_id, initial_position, positive, stream_name};

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
    /// The Kinesis stream, by name or ARN.
    pub stream: String,
    /// The application name; also the lease table's name.
    pub application: String,
    /// This worker's id: unique among the application's live workers.
    pub worker_id: String,
    /// Region, profile and endpoints.
    pub aws: AwsSettings,
    /// Where a shard without a checkpoint starts.
    pub initial_position: InitialPosition,
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
    /// How shards are read.
    pub retrieval: Retrieval,
    /// Where `/metrics` and `/healthz` are served; off when `None`.
    pub admin_listen: Option<std::net::SocketAddr>,
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
        let stream = layer.stream.ok_or(ConfigError::Missing { setting: "stream", flag: "stream", env: "STREAM" })?;
        let stream = stream_name(&stream)?;
        let application = layer
            .application
            .ok_or(ConfigError::Missing { setting: "application", flag: "application", env: "APPLICATION" })?;
        check_application(&application)?;
        let initial_position = initial_position(layer.initial_position.as_deref(), layer.initial_timestamp.as_deref())?;
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
            stream,
            application,
            worker_id: layer.worker_id.unwrap_or_else(default_worker_id),
            aws: AwsSettings {
                region: layer.region,
                profile: layer.profile,
                kinesis_endpoint: layer.kinesis_endpoint,
                dynamodb_endpoint: layer.dynamodb_endpoint,
                attempt_timeout: None,
            },
            initial_position,
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
            retrieval: Retrieval::parse(layer.retrieval.as_deref())?,
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
            runtime,
            outputs,
            output_buffer_bytes,
            failure,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use crate::output::TargetSpec;

    #[test]
    fn a_stream_is_given_by_name_or_by_arn() {
        assert_eq!(stream_name("orders").unwrap(), "orders");
        assert_eq!(stream_name("arn:aws:kinesis:us-east-2:123456789012:stream/orders").unwrap(), "orders");
        for bad in ["arn:aws:kinesis:us-east-2:123456789012:orders", "arn:aws:sqs:us-east-2:123456789012:stream/orders", "arn:aws:kinesis"] {
            let refused = stream_name(bad).unwrap_err().to_string();
            assert!(refused.starts_with("`stream` = ") && refused.contains("stream/<name>"), "{refused}");
        }
    }

    #[test]
    fn the_file_holds_the_swap_settings_too() {
        let file: Layer = toml::from_str("watch = true\nswap_canary_input = \"sample.jsonl\"").unwrap();
        let c = WorkerConfig::resolve(layer().over(file)).unwrap();
        assert!(c.watch);
        assert_eq!(c.swap_canary_input.as_deref(), Some(Path::new("sample.jsonl")));
        assert!(!WorkerConfig::resolve(layer()).unwrap().watch);
    }

    fn layer() -> Layer {
        Layer { stream: Some("s".into()), application: Some("app".into()), ..Default::default() }
    }

    #[test]
    fn defaults_follow_the_kcl() {
        let c = WorkerConfig::resolve(layer()).unwrap();
        assert_eq!(c.initial_position, InitialPosition::TrimHorizon);
        assert_eq!(c.take.failover_time, Duration::from_secs(10));
        assert_eq!(c.take.max_leases_to_steal, 1);
        assert_eq!(c.shard_sync_interval, Duration::from_secs(60));
        assert_eq!(c.fetch.max_records, 10_000);
    }

    #[test]
    fn flags_win_over_the_file() {
        let flags = Layer { failover_time: Some("3s".into()), ..layer() };
        let file: Layer = toml::from_str("failover_time = \"20s\"\nmax_leases = 4\nstream = \"other\"").unwrap();
        let c = WorkerConfig::resolve(flags.over(file)).unwrap();
        assert_eq!((c.stream.as_str(), c.take.failover_time, c.take.max_leases), ("s", Duration::from_secs(3), 4));
    }

    #[test]
    fn bad_settings_are_named_with_the_fix() {
        let cases = [
            (Layer { stream: None, ..layer() }, "--stream"),
            (Layer { initial_position: Some("OLDEST".into()), ..layer() }, "TRIM_HORIZON, LATEST or AT_TIMESTAMP"),
            (Layer { initial_position: Some("AT_TIMESTAMP".into()), ..layer() }, "initial_timestamp"),
            (Layer { failover_time: Some("ten".into()), ..layer() }, "10s"),
            (Layer { max_records: Some(20_000), ..layer() }, "1 to 10000"),
            (Layer { parallelism: Some(0), ..layer() }, "1 to 64 instances"),
            (Layer { parallelism: Some(65), ..layer() }, "1 to 64 instances"),
            (Layer { parallelism: Some(8), max_instances: Some(4), ..layer() }, "max_instances (4)"),
            (Layer { max_leases: Some(0), ..layer() }, "at least 1"),
            (Layer { failover_time: Some("1500".into()), ..layer() }, "with a unit"),
            (Layer { failover_time: Some("0s".into()), ..layer() }, "longer than zero"),
            (Layer { shard_sync_interval: Some("999999999999999999999m".into()), ..layer() }, "with a unit"),
            (Layer { shard_sync_interval: Some("48h".into()), ..layer() }, "at most 24h"),
            (Layer { call_deadline: Some("0ms".into()), ..layer() }, "longer than zero"),
            (Layer { memory_limit_mib: Some(0), ..layer() }, "at least 1"),
        ];
        for (layer, words) in cases {
            let err = WorkerConfig::resolve(layer).unwrap_err().to_string();
            assert!(err.contains(words), "{err:?} should mention {words:?}");
        }
    }

    #[test]
    fn parallelism_reads_n_calls_worth_and_counts_n_instances_per_lease() {
        let file: Layer = toml::from_str("parallelism = 8\nmax_records = 100\nmax_instances = 20").unwrap();
        let c = WorkerConfig::resolve(layer().over(file)).unwrap();
        assert_eq!((c.parallelism, c.fetch.max_records, c.fetch_limit(), c.take.max_leases), (8, 100, 800, 2));
        let c = WorkerConfig::resolve(Layer { parallelism: Some(64), ..layer() }).unwrap();
        assert_eq!(c.fetch_limit(), 10_000, "GetRecords gives at most 10,000");
    }

    #[test]
    fn sandbox_settings_have_file_keys_and_cap_the_leases() {
        let file: Layer = toml::from_str(
            "memory_limit_mib = 64\ncall_deadline = \"5s\"\nmax_instances = 8\ncache_dir = \"/tmp/c\"\nno_cache = true",
        )
        .unwrap();
        let c = WorkerConfig::resolve(layer().over(file)).unwrap();
        assert_eq!(c.runtime.memory_limit, 64 << 20);
        assert_eq!(c.runtime.call_deadline, Duration::from_secs(5));
        assert_eq!(c.runtime.max_instances, 8);
        assert_eq!(c.runtime.cache_dir, None, "no_cache wins over cache_dir");
        assert_eq!(c.take.max_leases, 8, "no more leases than instances");
    }

    #[test]
    fn swap_settings_have_file_keys() {
        let file: Layer = toml::from_str("swap_canary_batches = 0\nswap_rollback_after = 5\nswap_buffer_mib = 16").unwrap();
        let swap = WorkerConfig::resolve(layer().over(file)).unwrap().swap;
        assert_eq!((swap.canary_batches, swap.rollback_after, swap.buffer_bytes), (0, 5, 16 << 20));
        assert_eq!(WorkerConfig::resolve(layer()).unwrap().swap.buffer_bytes, 256 << 20);
    }

    #[test]
    fn the_failure_policy_has_lambdas_bounds_and_names_a_target_by_uri_or_output() {
        let failure = |toml_text: &str| WorkerConfig::resolve(layer().over(toml::from_str(toml_text).unwrap())).map(|c| c.failure);
        let default = failure("").unwrap();
        assert_eq!(default, FailureSettings::default());
        assert_eq!((default.max_retry_attempts, default.max_record_age, default.bisect_on_error, default.on_failure.as_ref()), (None, None, false, None));
        assert!(default.drop_warning().is_none(), "the default drops nothing");
        let set = failure("max_retry_attempts = 2\nmax_record_age = \"1h\"\nbisect_on_error = true\non_failure = \"dlq\"\n[outputs]\ndlq = \"kinesis:orders-dlq\"").unwrap();
        assert_eq!((set.max_retry_attempts, set.max_record_age), (Some(2), Some(Duration::from_secs(3600))));
        assert_eq!(set.on_failure, Some(TargetSpec::Kinesis("orders-dlq".into())), "an output's name stands for its target");
        assert_eq!(failure("max_retry_attempts = -1").unwrap().max_retry_attempts, None, "Lambda's -1");
        assert!(failure("max_retry_attempts = 1").unwrap().drop_warning().unwrap().contains("SKIPPED"), "a limit without a target drops records: said at start");
        for (bad, words) in [
            ("max_retry_attempts = 10001", "0 to 10000, or -1"),
            ("max_record_age = \"200h\"", "1s to 168h"),
            ("on_failure = \"s3:bucket\"", "or the name of an --output"),
        ] {
            let err = failure(bad).unwrap_err().to_string();
            assert!(err.contains(words), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let err = toml::from_str::<Layer>("failover = \"1s\"").unwrap_err().to_string();
        assert!(err.contains("unknown field `failover`"), "{err}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1500"), None, "a bare number has no unit");
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("2d"), None);
        assert_eq!(parse_duration("18446744073709551615m"), None, "overflow is refused, not a panic");
    }
}
