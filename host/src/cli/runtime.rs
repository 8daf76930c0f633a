//! The flags every command that runs a processor shares: the sandbox's
//! limits, outputs, variables, outbound HTTP and the failure policy.

use std::path::PathBuf;

use clap::Args;

use crate::config::Layer;
use crate::runtime::RuntimeConfig;

/// Sandbox limits, shared by every command that runs a processor.
#[derive(Debug, Args)]
pub struct RuntimeArgs {
    /// Most memory one processor instance may use, in MiB; with --parallelism, all of a shard's instances together [default: 256].
    #[arg(long, env = "KCL_HOST_MEMORY_LIMIT_MIB")]
    pub memory_limit_mib: Option<usize>,
    /// Longest one processor call may run, like 30s or 500ms [default: 30s].
    #[arg(long, env = "KCL_HOST_CALL_DEADLINE", allow_hyphen_values = true)]
    pub call_deadline: Option<String>,
    /// Where compiled components are cached [default: ~/.cache/kcl-host].
    #[arg(long, env = "KCL_HOST_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the component on every start instead of caching it.
    #[arg(long)]
    pub no_cache: bool,
    /// An output target processors send to by NAME: kinesis:STREAM, dynamodb:TABLE, http(s)://URL, stdout or file:PATH (repeatable). `replay` prints what is sent instead, undeclared names too (a file target writes its file).
    #[arg(long = "output", value_name = "NAME=URI", value_parser = key_value, env = "KCL_HOST_OUTPUTS", value_delimiter = ',')]
    pub outputs: Vec<(String, String)>,
    /// Output bytes all shards may queue, together, before a send waits for them to be written [default: 64].
    #[arg(long, env = "KCL_HOST_OUTPUT_BUFFER_MIB")]
    pub output_buffer_mib: Option<usize>,
    /// A destination processors may send HTTP requests to, in Spin's syntax: https://api.example.com, https://*.example.com:8443, http://127.0.0.1:8080 (repeatable). None by default.
    #[arg(long, value_name = "SCHEME://HOST[:PORT]", env = "KCL_HOST_ALLOW_OUTBOUND", value_delimiter = ',')]
    pub allow_outbound: Vec<String>,
    /// A variable processors read through wasi:config/store (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = key_value)]
    pub vars: Vec<(String, String)>,
    /// Retries of a failing batch (with --bisect-on-error, of the failing record) before it is given up on and sent to --on-failure; -1 retries without limit [default: -1]. Counted: errors the processor returns, traps, call deadlines, the memory cap. Never counted, always retried: throttling, AWS errors, output targets that fail, a lost lease.
    #[arg(long, env = "KCL_HOST_MAX_RETRY_ATTEMPTS", allow_hyphen_values = true)]
    pub max_retry_attempts: Option<i64>,
    /// Records older than this when read (like 1h) are given up on without reaching the processor [default: no limit].
    #[arg(long, env = "KCL_HOST_MAX_RECORD_AGE", allow_hyphen_values = true)]
    pub max_record_age: Option<String>,
    /// Split a failing batch in halves until the failing record is alone (a split is not an attempt), so only it is given up on.
    #[arg(long, env = "KCL_HOST_BISECT_ON_ERROR")]
    pub bisect_on_error: bool,
    /// Where records given up on go, each with its data in a JSON envelope: a target URI (kinesis:STREAM, dynamodb:TABLE, http(s)://URL, stdout, file:PATH) or an --output name. Without it they are logged and skipped.
    #[arg(long, value_name = "TARGET", env = "KCL_HOST_ON_FAILURE")]
    pub on_failure: Option<String>,
    /// First wait before a failed batch is delivered again; it doubles per attempt up to 30s [default: 500ms].
    #[arg(long, env = "KCL_HOST_RETRY_BACKOFF")]
    pub retry_backoff: Option<String>,
}

/// `KEY=VALUE`, split at the first `=`.
fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

impl RuntimeArgs {
    /// These flags as a settings layer.
    pub fn layer(&self) -> Layer {
        Layer {
            memory_limit_mib: self.memory_limit_mib,
            call_deadline: self.call_deadline.clone(),
            cache_dir: self.cache_dir.clone(),
            no_cache: self.no_cache.then_some(true),
            outputs: (!self.outputs.is_empty()).then(|| self.outputs.iter().cloned().collect()),
            output_buffer_mib: self.output_buffer_mib,
            allow_outbound: (!self.allow_outbound.is_empty()).then(|| self.allow_outbound.clone()),
            vars: (!self.vars.is_empty()).then(|| self.vars.iter().cloned().collect()),
            max_retry_attempts: self.max_retry_attempts,
            max_record_age: self.max_record_age.clone(),
            bisect_on_error: self.bisect_on_error.then_some(true),
            on_failure: self.on_failure.clone(),
            retry_backoff: self.retry_backoff.clone(),
            ..Layer::default()
        }
    }

    /// The runtime settings these flags describe (for commands with no config file).
    pub fn config(&self) -> Result<RuntimeConfig, crate::config::ConfigError> {
        self.layer().runtime()
    }
}
