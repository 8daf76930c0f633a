//! Command-line parsing. It only parses and hands settings to the code that
//! does the work.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::runtime::RuntimeConfig;

/// Consume Amazon Kinesis like the KCL does, with each shard's processor a
/// sandboxed WebAssembly component.
#[derive(Debug, Parser)]
#[command(name = "kcl-host", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a processor on records from a file: initialize, every batch,
    /// shutdown(shard-end). No AWS needed.
    #[command(after_help = "Examples:\n  \
        kcl-host replay counter.wasm --input records.jsonl\n  \
        printf '{\"data\":\"hi\"}\\n' | kcl-host replay counter.wasm --input -\n\n\
        Input: one JSON object per line with `data` (UTF-8 text) or `data_base64`, and optionally\n\
        `partition_key`, `sequence_number` (increasing) and `arrival` (RFC 3339).")]
    Replay(ReplayArgs),
}

/// `kcl-host replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The processor component (.wasm, built for wasm32-wasip2).
    pub processor: PathBuf,
    /// Records file, one JSON object per line; `-` reads standard input.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Records per process-records call.
    #[arg(long, default_value_t = 500)]
    pub batch_size: usize,
    /// Stream name the processor is told.
    #[arg(long, default_value = "replay")]
    pub stream: String,
    /// Shard id the processor is told.
    #[arg(long, default_value = "shardId-000000000000")]
    pub shard_id: String,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Sandbox limits, shared by every command that runs a processor.
#[derive(Debug, Args)]
pub struct RuntimeArgs {
    /// Most memory one processor instance may use, in MiB.
    #[arg(long, env = "KCL_HOST_MEMORY_LIMIT_MIB", default_value_t = 256)]
    pub memory_limit_mib: usize,
    /// Longest one processor call may run, in seconds.
    #[arg(long, env = "KCL_HOST_CALL_DEADLINE_SECS", default_value_t = 30)]
    pub call_deadline_secs: u64,
    /// Where compiled components are cached (default: ~/.cache/kcl-host).
    #[arg(long, env = "KCL_HOST_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the component on every start instead of caching it.
    #[arg(long)]
    pub no_cache: bool,
}

impl RuntimeArgs {
    /// The runtime settings these flags describe.
    pub fn config(&self, max_instances: u32) -> RuntimeConfig {
        let defaults = RuntimeConfig::default();
        RuntimeConfig {
            memory_limit: self.memory_limit_mib << 20,
            call_deadline: Duration::from_secs(self.call_deadline_secs),
            max_instances,
            cache_dir: if self.no_cache { None } else { self.cache_dir.clone().or(defaults.cache_dir) },
        }
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
