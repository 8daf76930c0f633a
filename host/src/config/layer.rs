//! One layer of settings (the flags, or the file), each optional, and how
//! layers stack.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use std::time::Duration;

use super::values::{duration, parse_duration, positive};
use crate::failure::{FailureSettings, RETRY_BACKOFF};
use crate::metrics::kcl::{Level, Selection, DIMENSIONS};
use crate::metrics::publish::{PublishSettings, SinkKind};
use super::ConfigError;
use crate::output::{parse_outputs, OutputSpec, TargetSpec};
use crate::runtime::{OutboundPolicy, RuntimeConfig};

/// Output bytes all shards may queue, together, before sends wait.
pub const DEFAULT_OUTPUT_BUFFER_MIB: usize = 64;

/// Lambda's bound on `MaximumRetryAttempts`.
const MAX_RETRY_ATTEMPTS: i64 = 10_000;
/// Lambda's bound on `MaximumRecordAgeInSeconds`: 7 days.
const MAX_RECORD_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Every setting, each optional: one layer (flags, or the file). Each
/// field is the flag of the same name (`worker_id` is `--worker-id`);
/// `--help` and docs/REFERENCE.md say what each one does.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // each field is documented as its flag
pub struct Layer {
    pub stream: Option<String>,
    /// `streams` in the file, or `--stream` given more than once.
    pub streams: Option<Vec<super::StreamEntry>>,
    /// A DynamoDB table whose current stream is read (instead of `stream`).
    pub dynamodb_table: Option<String>,
    pub needs_images: Option<String>,
    pub application: Option<String>,
    pub worker_id: Option<String>,
    pub region: Option<String>,
    pub profile: Option<String>,
    pub kinesis_endpoint: Option<String>,
    pub dynamodb_endpoint: Option<String>,
    pub initial_position: Option<String>,
    pub initial_timestamp: Option<String>,
    pub max_leases: Option<usize>,
    pub max_leases_to_steal: Option<usize>,
    /// `auto` or `per-lease`.
    pub lease_renewal: Option<String>,
    pub fleet_heartbeat_reads: Option<u32>,
    pub failover_time: Option<String>,
    pub shard_sync_interval: Option<String>,
    pub idle_time_between_reads: Option<String>,
    pub max_records: Option<i32>,
    pub parallelism: Option<usize>,
    pub window: Option<String>,
    pub retrieval: Option<String>,
    pub admin_listen: Option<String>,
    /// `cloudwatch`, `emf`.
    pub metrics: Option<Vec<String>>,
    pub metrics_level: Option<String>,
    pub metrics_dimensions: Option<Vec<String>>,
    pub metrics_buffer_time: Option<String>,
    pub metrics_emf_file: Option<PathBuf>,
    pub swap_canary_batches: Option<u32>,
    pub swap_rollback_after: Option<u32>,
    pub swap_buffer_mib: Option<usize>,
    pub swap_canary_input: Option<PathBuf>,
    pub watch: Option<bool>,
    pub memory_limit_mib: Option<usize>,
    pub call_deadline: Option<String>,
    pub max_instances: Option<u32>,
    pub cache_dir: Option<PathBuf>,
    pub no_cache: Option<bool>,
    /// `[outputs]` in the file: name = URI.
    pub outputs: Option<BTreeMap<String, String>>,
    pub output_buffer_mib: Option<usize>,
    pub allow_outbound: Option<Vec<String>>,
    /// `[vars]` in the file: key = value.
    pub vars: Option<BTreeMap<String, String>>,
    /// -1 (the default) retries without limit, as Lambda's `MaximumRetryAttempts`.
    pub max_retry_attempts: Option<i64>,
    pub max_record_age: Option<String>,
    pub bisect_on_error: Option<bool>,
    /// A target URI, or the name of a declared output.
    pub on_failure: Option<String>,
    pub retry_backoff: Option<String>,
}

impl Layer {
    /// Reads a TOML file of settings.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let file = |reason: String| ConfigError::File { path: path.display().to_string(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
        toml::from_str(&text).map_err(|e| file(e.to_string()))
    }

    /// This layer, with `lower` filling what it leaves out.
    pub fn over(self, lower: Layer) -> Layer {
        // `stream`, `streams` and `dynamodb_table` are one setting: the upper layer's wins whole.
        let (stream, streams, dynamodb_table) = match (self.stream, self.streams, self.dynamodb_table) {
            (None, None, None) => (lower.stream, lower.streams, lower.dynamodb_table),
            upper => upper,
        };
        macro_rules! merge {
            ($($field:ident),*) => { Layer { stream, streams, dynamodb_table, $($field: self.$field.or(lower.$field)),* } };
        }
        merge!(
            needs_images, application, worker_id, region, profile, kinesis_endpoint, dynamodb_endpoint, initial_position,
            initial_timestamp, max_leases, max_leases_to_steal, lease_renewal, fleet_heartbeat_reads, failover_time, shard_sync_interval,
            idle_time_between_reads, max_records, parallelism, window, retrieval, admin_listen, metrics, metrics_level,
            metrics_dimensions, metrics_buffer_time, metrics_emf_file, swap_canary_batches, swap_rollback_after, swap_buffer_mib,
            swap_canary_input, watch, memory_limit_mib, call_deadline, max_instances, cache_dir, no_cache, outputs,
            output_buffer_mib, allow_outbound, vars, max_retry_attempts, max_record_age, bisect_on_error, on_failure,
            retry_backoff
        )
    }

    /// The metrics publishing this layer (over the defaults) describes.
    pub fn metrics(&self) -> Result<PublishSettings, ConfigError> {
        let defaults = PublishSettings::default();
        let invalid = |setting, value: String, reason: &str| ConfigError::Invalid { setting, value, reason: reason.into() };
        let sinks = self
            .metrics
            .iter()
            .flatten()
            .map(|sink| match sink.as_str() {
                "cloudwatch" => Ok(SinkKind::CloudWatch),
                "emf" => Ok(SinkKind::Emf),
                other => Err(invalid("metrics", other.to_owned(), "expected cloudwatch or emf")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let level = match &self.metrics_level {
            Some(text) => Level::parse(text).ok_or_else(|| invalid("metrics_level", text.clone(), "expected NONE, SUMMARY or DETAILED"))?,
            None => defaults.selection.level,
        };
        let dimensions = match &self.metrics_dimensions {
            Some(names) => {
                for name in names {
                    if !DIMENSIONS.contains(&name.as_str()) {
                        return Err(invalid("metrics_dimensions", name.clone(), "expected Operation, ShardId, StreamId or WorkerIdentifier"));
                    }
                }
                names.clone()
            }
            None => defaults.selection.dimensions,
        };
        Ok(PublishSettings {
            sinks,
            selection: Selection { level, dimensions, ..defaults.selection },
            interval: duration("metrics_buffer_time", self.metrics_buffer_time.as_deref(), defaults.interval)?,
            emf_file: self.metrics_emf_file.clone(),
        })
    }

    /// The sandbox limits this layer (over the defaults) describes.
    pub fn runtime(&self) -> Result<RuntimeConfig, ConfigError> {
        let defaults = RuntimeConfig::default();
        let memory_limit_mib = positive("memory_limit_mib", self.memory_limit_mib.unwrap_or(defaults.memory_limit >> 20))?;
        Ok(RuntimeConfig {
            memory_limit: memory_limit_mib.checked_mul(1 << 20).ok_or_else(|| ConfigError::Invalid {
                setting: "memory_limit_mib",
                value: memory_limit_mib.to_string(),
                reason: "is larger than this machine can address".into(),
            })?,
            call_deadline: duration("call_deadline", self.call_deadline.as_deref(), defaults.call_deadline)?,
            max_instances: positive("max_instances", self.max_instances.unwrap_or(defaults.max_instances) as usize)? as u32,
            cache_dir: if self.no_cache == Some(true) { None } else { self.cache_dir.clone().or(defaults.cache_dir) },
            outbound: OutboundPolicy::parse(self.allow_outbound.iter().flatten().map(String::as_str)).map_err(|reason| ConfigError::Invalid {
                setting: "allow_outbound",
                value: self.allow_outbound.clone().unwrap_or_default().join(","),
                reason,
            })?,
            vars: self.vars.clone().unwrap_or_default(),
        })
    }

    /// The failure policy: retries, record age, bisection and where records
    /// given up on go (`on_failure` is a target URI or a declared output's name).
    pub fn failure(&self) -> Result<FailureSettings, ConfigError> {
        let invalid = |setting: &'static str, value: String, reason: &str| ConfigError::Invalid { setting, value, reason: reason.to_owned() };
        let max_retry_attempts = match self.max_retry_attempts {
            None | Some(-1) => None,
            Some(n @ 0..=MAX_RETRY_ATTEMPTS) => Some(n as u32),
            Some(n) => return Err(invalid("max_retry_attempts", n.to_string(), "use 0 to 10000, or -1 to retry without limit (the default)")),
        };
        let max_record_age = match self.max_record_age.as_deref() {
            None | Some("-1") => None,
            Some(text) => match parse_duration(text) {
                Some(age) if age >= Duration::from_secs(1) && age <= MAX_RECORD_AGE => Some(age),
                _ => return Err(invalid("max_record_age", text.to_owned(), "use a duration from 1s to 168h (7 days, Lambda's longest), like 1h, or -1 for no limit")),
            },
        };
        let on_failure = match self.on_failure.as_deref() {
            None => None,
            Some(name_or_uri) => {
                let uri = self.outputs.as_ref().and_then(|outputs| outputs.get(name_or_uri)).map_or(name_or_uri, String::as_str);
                Some(TargetSpec::parse(uri).map_err(|reason| invalid("on_failure", name_or_uri.to_owned(), &format!("{reason}, or the name of an --output")))?)
            }
        };
        Ok(FailureSettings {
            max_retry_attempts,
            max_record_age,
            bisect_on_error: self.bisect_on_error.unwrap_or(false),
            on_failure,
            retry_backoff: duration("retry_backoff", self.retry_backoff.as_deref(), RETRY_BACKOFF)?,
        })
    }

    /// The declared outputs and their buffer (default [`DEFAULT_OUTPUT_BUFFER_MIB`]).
    pub fn outputs(&self) -> Result<(Vec<OutputSpec>, usize), ConfigError> {
        let declared = self.outputs.clone().unwrap_or_default();
        let specs = parse_outputs(&declared).map_err(|reason| ConfigError::Invalid {
            setting: "outputs",
            value: declared.iter().map(|(name, uri)| format!("{name}={uri}")).collect::<Vec<_>>().join(","),
            reason,
        })?;
        let mib = positive("output_buffer_mib", self.output_buffer_mib.unwrap_or(DEFAULT_OUTPUT_BUFFER_MIB))?;
        Ok((specs, mib << 20))
    }
}
