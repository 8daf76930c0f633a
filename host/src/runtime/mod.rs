//! The WebAssembly side of kcl-host: one wasmtime [`Engine`], processors
//! loaded from components, and one sandboxed instance per shard.
//!
//! This module knows nothing of AWS, leases or shards beyond an id; it loads
//! components and calls them, so it runs the same under `kcl-host run`,
//! `kcl-host replay` and the benchmarks.
//!
//! Sandbox: every instance has its own [`wasmtime::Store`], a memory cap, a
//! deadline per call (epoch interruption), and WASI with no filesystem,
//! network, environment or arguments. Its stdout/stderr and `log` calls go to
//! the host log tagged with the shard id; its `state` is read and committed
//! through what the caller gives it ([`StateSource`], [`CheckpointSink`]).

mod bindings;
mod cache;
mod checkpoint;
mod contract;
mod error;
mod guest_log;
mod host;
mod instance;
mod legacy;
mod metadata;
mod outbound;
mod output;
mod processor;
mod state;
mod store;
mod v0_1;
mod v0_2;
mod v0_3;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};
use wasmtime_wasi_config::WasiConfigVariables;

pub use bindings::v0_4::kcl::processor::log::Level as LogLevel;
pub use bindings::v0_4::kcl::processor::types::{CheckpointError, ProcessorError, ShardInfo, ShutdownReason};
pub use cache::Precompiled;
pub use checkpoint::{CheckpointFuture, CheckpointSink};
pub use error::CallError;
pub use guest_log::GUEST_TARGET;
pub use instance::ShardInstance;
pub use metadata::ComponentMetadata;
pub use outbound::OutboundPolicy;
pub use output::{NoOutputs, OutputFuture, OutputRecords, OutputSink, SendError};
pub use processor::{LoadError, Processor};
pub use store::SharedMemory;
pub(crate) use state::Cache as StateCache;
pub use state::{KeyedState, StateChanges, StateError, StateFuture, StateSource, HOST_KEY_PREFIX, MAX_CHANGED_BYTES, MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use bindings::v0_4::windowed::exports::kcl::processor::window::WindowBounds;

/// The SHA-256 of a component's `bytes` in hex: what names it in the
/// compile cache and the fleet's artifacts; [`Processor::hash`] is its start.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The `kcl:processor` contract versions a processor may implement.
pub fn contract_versions() -> impl Iterator<Item = &'static str> {
    contract::RECORD_PROCESSOR_EXPORTS.iter().map(|(version, _)| *version)
}

/// How often the epoch advances: a running guest yields to the async
/// runtime, and its call deadline is checked, once per tick.
const EPOCH_TICK: Duration = Duration::from_millis(10);

impl ShardInfo {
    /// A shard never checkpointed, delivered from its oldest record.
    pub fn new(stream_name: impl Into<String>, shard_id: impl Into<String>) -> Self {
        Self {
            stream_name: stream_name.into(),
            shard_id: shard_id.into(),
            starting_checkpoint: "TRIM_HORIZON".into(),
            starting_sub_sequence_number: None,
        }
    }
}

/// Limits and settings shared by every instance of a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Most linear memory one instance may grow to, in bytes.
    pub memory_limit: usize,
    /// Longest one guest call (initialize, a batch, shutdown) may run.
    pub call_deadline: Duration,
    /// Most instances alive at once (slots reserved by the pooling allocator).
    pub max_instances: u32,
    /// Where compiled components are cached; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
    /// Where guests may send HTTP requests (`--allow-outbound`); nowhere by default.
    pub outbound: OutboundPolicy,
    /// Variables guests read through `wasi:config/store` (`--var KEY=VALUE`).
    pub vars: BTreeMap<String, String>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            memory_limit: 256 << 20,
            call_deadline: Duration::from_secs(30),
            max_instances: 1000,
            cache_dir: default_cache_dir(),
            outbound: OutboundPolicy::default(),
            vars: BTreeMap::new(),
        }
    }
}

/// `$XDG_CACHE_HOME/kcl-host` or `~/.cache/kcl-host`.
fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("kcl-host"))
}

/// One wasmtime engine and its settings; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    config: RuntimeConfig,
    /// `config.vars`, as every store reads them.
    vars: Arc<WasiConfigVariables>,
}

impl Runtime {
    /// Builds the engine and starts the epoch ticker that enforces call deadlines.
    pub fn new(config: RuntimeConfig) -> wasmtime::Result<Self> {
        let engine = Engine::new(&engine_config(&config))?;
        spawn_epoch_ticker(&engine);
        let vars = Arc::new(config.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect());
        Ok(Self { inner: Arc::new(Inner { engine, config, vars }) })
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The settings this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Names the engine's compiled code: components compiled by runtimes
    /// of one id load in each other.
    pub fn engine_id(&self) -> String {
        cache::engine_id(self.engine())
    }

    /// Whether the cache directory holds this engine's compiled `component`.
    pub fn has_compiled(&self, component: &[u8]) -> bool {
        self.config().cache_dir.as_deref().is_some_and(|dir| cache::is_cached(self.engine(), component, dir))
    }

    fn vars(&self) -> Arc<WasiConfigVariables> {
        self.inner.vars.clone()
    }
}

fn engine_config(config: &RuntimeConfig) -> Config {
    let mut pool = PoolingAllocationConfig::default();
    let instances = config.max_instances;
    // A component holds a few core instances (its modules and adapter shims);
    // Go components carry an adapter with a memory of its own.
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(8))
        .total_memories(instances.saturating_mul(2))
        .total_tables(instances.saturating_mul(4))
        .max_memory_size(config.memory_limit)
        .table_elements(100_000)
        .max_memories_per_component(4)
        .max_tables_per_component(8);

    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    cfg
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("kcl-host-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch thread");
}
