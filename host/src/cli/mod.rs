//! Command-line parsing. It only parses and hands settings to the code that
//! does the work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Layer;

mod operator;
mod runtime;
pub use operator::{AccountArgs, DashboardArgs, StateAction, StateArgs, StatusArgs};
pub use runtime::RuntimeArgs;

/// Consume Amazon Kinesis like the KCL does, with each shard's processor a
/// sandboxed WebAssembly component.
#[derive(Debug, Parser)]
#[command(name = "kcl-host", version = crate::version(), propagate_version = true)]
pub struct Cli {
    /// Log lines as text, or as one JSON object per line (fields such as
    /// `shard` at the top level) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "KCL_HOST_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written (to stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Consume a Kinesis stream: leases in DynamoDB (shared with every other
    /// worker of the application), one sandboxed processor instance per shard.
    #[command(after_help = "Examples:\n  \
        kcl-host run processor.wasm --stream orders --application orders-totals --region us-east-2\n  \
        kcl-host run processor.wasm --config kcl-host.toml\n\n\
        Every flag can also be set with a KCL_HOST_* variable (see each flag) or in the --config file.\n\
        Credentials and endpoints come from the standard AWS chain: AWS_REGION, AWS_PROFILE,\n\
        AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_KINESIS, AWS_ENDPOINT_URL_DYNAMODB, ~/.aws/config.\n\
        SIGINT or SIGTERM stops gracefully: shutdown(requested) on every shard, leases released;\n\
        a second one stops at once (the next owners read again what followed each checkpoint).")]
    Run(Box<RunArgs>),
    /// Run a processor on records from a file: initialize, every batch,
    /// shutdown(shard-end). No AWS needed.
    #[command(after_help = "Examples:\n  \
        kcl-host replay counter.wasm --input records.jsonl\n  \
        printf '{\"data\":\"hi\"}\\n' | kcl-host replay counter.wasm --input -\n\n\
        Input: one JSON object per line with `data` (UTF-8 text) or `data_base64`, and optionally\n\
        `partition_key`, `sequence_number` (increasing) and `arrival` (RFC 3339).")]
    Replay(Box<ReplayArgs>),
    /// Show an application's shards and workers, from its lease table (Java
    /// KCL's too) and the kcl-host control table.
    #[command(after_help = "Examples:\n  \
        kcl-host status --application orders-totals\n  \
        kcl-host status --application orders-totals --watch 2s\n  \
        kcl-host status --application orders-totals --lag --stream orders --json")]
    Status(StatusArgs),
    /// Serve a live web page of an application's shards, lineage, workers,
    /// rollout and failures: what `status --json` says, read again every 2 s.
    #[command(after_help = "Examples:\n  \
        kcl-host dashboard --application orders-totals\n  \
        kcl-host dashboard --application orders-totals --listen 0.0.0.0:8080 --state\n\n\
        Open http://127.0.0.1:8080/ in a browser. The page reads the tables through this process\n\
        (GET /status.json, the report `status --json` prints) and changes nothing. A worker run\n\
        with --admin-listen serves the same page at its /.")]
    Dashboard(DashboardArgs),
    /// Deploy a processor to every worker of an application (through its
    /// control table), or roll back to the one before.
    #[command(after_help = "Examples:\n  \
        kcl-host deploy /shared/processors/v2.wasm --application orders-totals\n  \
        kcl-host deploy --rollback --application orders-totals\n\n\
        The component is checked here, stored in DynamoDB (<application>-KclHostComponents)\n\
        and named in the control table's deploy row; every worker loads it from there at its\n\
        next heartbeat read (and at start), checks it, and rolls it out like a local swap (a\n\
        canary shard, then the rest). Nothing is written for an application that does not\n\
        exist or a file that is not a working component.")]
    Deploy(DeployArgs),
    /// Read an application's processor state: what its last checkpoints committed.
    #[command(after_help = "Examples:\n  \
        kcl-host state --application orders-totals dump\n  \
        kcl-host state --application orders-totals get --stream orders --key user-42\n\n\
        Values print as text, or as base64:... when they are not UTF-8. Reads the state table\n\
        <application>-KclHostState and creates nothing.")]
    State(StateArgs),
    /// Print the least-privilege IAM policy for a worker run with these
    /// settings: the same arguments as `run`.
    #[command(after_help = "Examples:\n  \
        kcl-host iam-policy processor.wasm --stream orders --application orders-totals --region us-east-2 --account-id 123456789012\n  \
        kcl-host iam-policy processor.wasm --config kcl-host.toml --account-id 123456789012 > policy.json\n\n\
        Put `iam-policy` where `run` was, and add --account-id. The policy names the streams, the\n\
        application's tables, the fan-out consumer, each output and the --on-failure target; a region\n\
        or account that is not known is a `*` in the ARNs (said on stderr). The state table is always\n\
        granted, since a version deployed later may use state. The processor file is not read.")]
    IamPolicy(Box<IamPolicyArgs>),
    /// Make a processor project that builds and replays as created.
    #[command(after_help = "Examples:\n  \
        kcl-host init orders-totals --lang rust\n  \
        kcl-host init orders-totals --lang go\n  \
        kcl-host init orders-totals --lang python\n  \
        kcl-host init orders-totals --lang js")]
    Init(InitArgs),
}

/// `kcl-host deploy`.
#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The component to deploy (checked here first).
    #[arg(required_unless_present = "rollback")]
    pub processor: Option<PathBuf>,
    /// Application name (the lease table; the control table is `<application>-KclHostControl`).
    #[arg(long, env = "KCL_HOST_APPLICATION")]
    pub application: String,
    /// Pin the version deployed before the current one.
    #[arg(long, conflicts_with = "processor")]
    pub rollback: bool,
    /// Where and as whom to call AWS.
    #[command(flatten)]
    pub aws: AccountArgs,
}

/// `kcl-host iam-policy`.
#[derive(Debug, Args)]
pub struct IamPolicyArgs {
    /// The AWS account the streams and tables are in [default: any, `*`].
    #[arg(long, env = "KCL_HOST_ACCOUNT_ID")]
    pub account_id: Option<String>,
    /// The worker's arguments, as for `run`.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `kcl-host init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project's directory (its last part names the processor).
    pub name: PathBuf,
    /// The processor's language.
    #[arg(long, value_enum)]
    pub lang: crate::init::Lang,
    /// A kcl-host checkout whose SDK the project uses where it is [default: a copy of the SDK, written into the project's kcl/].
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// `kcl-host run`. Settings left out here come from the config file, then defaults.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The processor component (.wasm, built for wasm32-wasip2).
    pub processor: PathBuf,
    /// TOML file with any of the settings below (flags and variables win).
    #[arg(long, env = "KCL_HOST_CONFIG")]
    pub config: Option<PathBuf>,
    /// Kinesis stream to consume: its name or its ARN. Give it more than once (or a comma-separated list) to consume several streams in one application: their lease keys then name the stream, as Java KCL's multi-stream applications' do. Or a DynamoDB stream's ARN (`arn:aws:dynamodb:REGION:ACCOUNT:table/T/stream/LABEL`), read alone.
    #[arg(long, env = "KCL_HOST_STREAM", value_delimiter = ',')]
    pub stream: Vec<String>,
    /// Consume this DynamoDB table's current stream (instead of --stream): its changes reach the processor as the stream's records (eventName, Keys, NewImage, OldImage).
    #[arg(long, env = "KCL_HOST_DYNAMODB_TABLE", conflicts_with = "stream")]
    pub dynamodb_table: Option<String>,
    /// The item images this processor reads from a DynamoDB stream: new, old or new-and-old. The worker refuses to start on a stream whose view type lacks them (a KEYS_ONLY stream has none) [default: no check].
    #[arg(long, env = "KCL_HOST_NEEDS_IMAGES")]
    pub needs_images: Option<String>,
    /// Application name; also the DynamoDB lease table's name.
    #[arg(long, env = "KCL_HOST_APPLICATION")]
    pub application: Option<String>,
    /// This worker's id in the lease table [default: hostname-pid-random].
    #[arg(long, env = "KCL_HOST_WORKER_ID")]
    pub worker_id: Option<String>,
    /// AWS region (else AWS_REGION or the profile's).
    #[arg(long, env = "KCL_HOST_REGION")]
    pub region: Option<String>,
    /// AWS profile (else AWS_PROFILE).
    #[arg(long, env = "KCL_HOST_PROFILE")]
    pub profile: Option<String>,
    /// Kinesis endpoint URL (else AWS_ENDPOINT_URL_KINESIS / AWS_ENDPOINT_URL).
    #[arg(long, env = "KCL_HOST_KINESIS_ENDPOINT")]
    pub kinesis_endpoint: Option<String>,
    /// DynamoDB endpoint URL (else AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL).
    #[arg(long, env = "KCL_HOST_DYNAMODB_ENDPOINT")]
    pub dynamodb_endpoint: Option<String>,
    /// Where new shards start: TRIM_HORIZON, LATEST or AT_TIMESTAMP [default: TRIM_HORIZON].
    #[arg(long, env = "KCL_HOST_INITIAL_POSITION")]
    pub initial_position: Option<String>,
    /// With AT_TIMESTAMP: an RFC 3339 time.
    #[arg(long, env = "KCL_HOST_INITIAL_TIMESTAMP")]
    pub initial_timestamp: Option<String>,
    /// Most leases this worker holds (maxLeasesForWorker) [default: no limit].
    #[arg(long, env = "KCL_HOST_MAX_LEASES")]
    pub max_leases: Option<usize>,
    /// Most leases stolen in one pass (maxLeasesToStealAtOneTime) [default: 1].
    #[arg(long, env = "KCL_HOST_MAX_LEASES_TO_STEAL")]
    pub max_leases_to_steal: Option<usize>,
    /// How leases are renewed: `auto` lets each worker's heartbeat renew its leases while every lease owner is a kcl-host worker (no write per lease), and renews each lease as Java KCL does once a worker without a heartbeat (Java KCL) owns one; `per-lease` always renews each lease [default: auto].
    #[arg(long, env = "KCL_HOST_LEASE_RENEWAL", value_parser = ["auto", "per-lease"])]
    pub lease_renewal: Option<String>,
    /// Heartbeat reads a second that the workers other than the two watchers (the lowest worker ids, which read every 500 ms) make between them: fewer cost less, more let a large fleet notice a join or a deploy sooner [default: 10].
    #[arg(long, env = "KCL_HOST_FLEET_HEARTBEAT_READS")]
    pub fleet_heartbeat_reads: Option<u32>,
    /// Time without renewal after which a lease may be taken (failoverTimeMillis) [default: 10s].
    #[arg(long, env = "KCL_HOST_FAILOVER_TIME", allow_hyphen_values = true)]
    pub failover_time: Option<String>,
    /// Time between shard syncs (shardSyncIntervalMillis) [default: 60s].
    #[arg(long, env = "KCL_HOST_SHARD_SYNC_INTERVAL", allow_hyphen_values = true)]
    pub shard_sync_interval: Option<String>,
    /// Wait between reads of a caught-up shard (idleTimeBetweenReadsInMillis) [default: 1s].
    #[arg(long, env = "KCL_HOST_IDLE_TIME_BETWEEN_READS", allow_hyphen_values = true)]
    pub idle_time_between_reads: Option<String>,
    /// Records per GetRecords call, 1 to 10000 (maxRecords) [default: 10000].
    #[arg(long, env = "KCL_HOST_MAX_RECORDS")]
    pub max_records: Option<i32>,
    /// Processor instances per shard, 1 to 64: records are routed by partition key (or explicit hash key), so each key's records are processed in order by one instance while other keys run beside it; the host then checkpoints where every record below is done, and --max-records is per call [default: 1].
    #[arg(long, env = "KCL_HOST_PARALLELISM")]
    pub parallelism: Option<usize>,
    /// Tumbling windows of arrival time, e.g. 60s: the processor's window.close is called as each ends for its shard, and what it changes is committed like a checkpoint; with --parallelism over 1, once every instance finished the window's records [default: off].
    #[arg(long, env = "KCL_HOST_WINDOW")]
    pub window: Option<String>,
    /// How shards are read: polling (GetRecords) or fanout (enhanced fan-out,
    /// a stream consumer named after the application) [default: polling].
    #[arg(long, env = "KCL_HOST_RETRIEVAL")]
    pub retrieval: Option<String>,
    /// Serve Prometheus /metrics and /healthz here, e.g. 127.0.0.1:9090 [default: off].
    #[arg(long, env = "KCL_HOST_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,
    /// Publish metrics to CloudWatch as well as /metrics: `cloudwatch` (PutMetricData, one call a minute per 1,000 values) or `emf` (Embedded Metric Format lines on stdout or --metrics-emf-file, for the CloudWatch agent or the awslogs driver; no API call) (repeatable) [default: neither].
    #[arg(long, value_name = "SINK", env = "KCL_HOST_METRICS", value_delimiter = ',', value_parser = ["cloudwatch", "emf"])]
    pub metrics: Vec<String>,
    /// Which metrics are published, as KCL's metricsLevel: NONE, SUMMARY or DETAILED [default: DETAILED].
    #[arg(long, env = "KCL_HOST_METRICS_LEVEL")]
    pub metrics_level: Option<String>,
    /// The dimensions published, as KCL's metricsEnabledDimensions: any of ShardId, StreamId, WorkerIdentifier (Operation is always on); a dimension left out is summed over [default: all].
    #[arg(long, env = "KCL_HOST_METRICS_DIMENSIONS", value_delimiter = ',')]
    pub metrics_dimensions: Vec<String>,
    /// How often metrics are published (KCL's metricsBufferTimeMillis) [default: 60s].
    #[arg(long, env = "KCL_HOST_METRICS_BUFFER_TIME")]
    pub metrics_buffer_time: Option<String>,
    /// With --metrics emf: append the lines to this file instead of stdout.
    #[arg(long, env = "KCL_HOST_METRICS_EMF_FILE")]
    pub metrics_emf_file: Option<PathBuf>,
    /// Most processor instances alive at once (slots reserved up front); also caps --max-leases [default: 1000].
    #[arg(long, env = "KCL_HOST_MAX_INSTANCES")]
    pub max_instances: Option<u32>,
    /// Swap the processor whenever its file changes (SIGHUP always reloads it).
    #[arg(long, env = "KCL_HOST_WATCH")]
    pub watch: bool,
    /// Records (as for `replay`) a new processor must process without error before any shard swaps to it.
    #[arg(long, env = "KCL_HOST_SWAP_CANARY_INPUT")]
    pub swap_canary_input: Option<PathBuf>,
    /// On a swap, batches one canary shard must process without error before the rest swap; 0 swaps all at once [default: 3].
    #[arg(long, env = "KCL_HOST_SWAP_CANARY_BATCHES")]
    pub swap_canary_batches: Option<u32>,
    /// Failed calls of a new version (traps, deadlines, memory, fatal) that roll every shard back [default: 3].
    #[arg(long, env = "KCL_HOST_SWAP_ROLLBACK_AFTER")]
    pub swap_rollback_after: Option<u32>,
    /// Record data all shards keep, together, to give a swapped-in version what followed each checkpoint; a shard over it restarts from its checkpoint on a swap instead [default: 256].
    #[arg(long, env = "KCL_HOST_SWAP_BUFFER_MIB")]
    pub swap_buffer_mib: Option<usize>,
    /// The sandbox's limits and the compile cache.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

impl RunArgs {
    /// The worker's settings: these flags and variables over the `--config`
    /// file, resolved and checked.
    pub fn worker_config(&self) -> Result<crate::config::WorkerConfig, String> {
        let file = match &self.config {
            Some(path) => Layer::from_file(path).map_err(|e| e.to_string())?,
            None => Layer::default(),
        };
        crate::config::WorkerConfig::resolve(self.layer().over(file)).map_err(|e| e.to_string())
    }

    /// The settings given as flags or variables, as a layer over the file.
    pub fn layer(&self) -> Layer {
        Layer {
            stream: (self.stream.len() == 1).then(|| self.stream[0].clone()),
            streams: (self.stream.len() > 1).then(|| self.stream.iter().cloned().map(crate::config::StreamEntry::Name).collect()),
            dynamodb_table: self.dynamodb_table.clone(),
            needs_images: self.needs_images.clone(),
            application: self.application.clone(),
            worker_id: self.worker_id.clone(),
            region: self.region.clone(),
            profile: self.profile.clone(),
            kinesis_endpoint: self.kinesis_endpoint.clone(),
            dynamodb_endpoint: self.dynamodb_endpoint.clone(),
            initial_position: self.initial_position.clone(),
            initial_timestamp: self.initial_timestamp.clone(),
            max_leases: self.max_leases,
            max_leases_to_steal: self.max_leases_to_steal,
            lease_renewal: self.lease_renewal.clone(),
            fleet_heartbeat_reads: self.fleet_heartbeat_reads,
            failover_time: self.failover_time.clone(),
            shard_sync_interval: self.shard_sync_interval.clone(),
            idle_time_between_reads: self.idle_time_between_reads.clone(),
            max_records: self.max_records,
            parallelism: self.parallelism,
            window: self.window.clone(),
            retrieval: self.retrieval.clone(),
            admin_listen: self.admin_listen.clone(),
            metrics: (!self.metrics.is_empty()).then(|| self.metrics.clone()),
            metrics_level: self.metrics_level.clone(),
            metrics_dimensions: (!self.metrics_dimensions.is_empty()).then(|| self.metrics_dimensions.clone()),
            metrics_buffer_time: self.metrics_buffer_time.clone(),
            metrics_emf_file: self.metrics_emf_file.clone(),
            swap_canary_batches: self.swap_canary_batches,
            swap_rollback_after: self.swap_rollback_after,
            swap_buffer_mib: self.swap_buffer_mib,
            swap_canary_input: self.swap_canary_input.clone(),
            watch: self.watch.then_some(true),
            max_instances: self.max_instances,
            ..self.runtime.layer()
        }
    }
}

/// `kcl-host replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The processor component (.wasm, built for wasm32-wasip2).
    pub processor: PathBuf,
    /// Records file: one JSON object per line (`data` or `data_base64`, optional `partition_key`, `sequence_number`, `arrival`), the output of `aws kinesis get-records`, or a Lambda Kinesis event; `-` reads standard input.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Records per process-records call.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// Stream name the processor is told.
    #[arg(long, default_value = "replay")]
    pub stream: String,
    /// Shard id the processor is told.
    #[arg(long, default_value = "shardId-000000000000")]
    pub shard_id: String,
    /// A JSON file (key → value) the processor's state is loaded from
    /// first and saved to at the end, as the checkpoints committed it;
    /// created when missing. Without it, state starts empty.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Tumbling windows of the records' arrival times, like 60s, as `run --window` has them: each closed when a record of a later one comes, the last at the end of the input (the processor must export `window`).
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,
    /// A golden test: compare what the processor sent (per target, in order), its checkpoints and its final state with FILE (JSON lines), print the difference and fail if there is one. Nothing is printed for the sends.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// With --expect: write FILE from this replay instead of comparing.
    #[arg(long, requires = "expect")]
    pub update_expected: bool,
    /// The sandbox's limits and the compile cache.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

impl ReplayArgs {
    /// What to replay, the settings resolved.
    pub fn command(self) -> Result<crate::replay::command::ReplayCommand, crate::config::ConfigError> {
        let layer = self.runtime.layer();
        Ok(crate::replay::command::ReplayCommand {
            runtime: self.runtime.config()?,
            outputs: layer.outputs()?,
            failure: layer.failure()?,
            shard: crate::runtime::ShardInfo::new(self.stream, self.shard_id),
            processor: self.processor,
            input: self.input,
            batch_size: self.batch_size as usize,
            state_file: self.state,
            window: self.window.as_deref().map(|text| crate::config::duration("window", Some(text), Default::default())).transpose()?,
            expect: self.expect.map(|file| (file, self.update_expected)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
