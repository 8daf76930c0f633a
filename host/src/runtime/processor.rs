//! Loading a processor component: checks that name what is wrong and how to
//! fix it, compilation (cached), and a test instantiation so a component
//! that does not fit the world fails at load, not on the first shard.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::Component;

use super::checkpoint::CheckpointSink;
use super::contract::{self, Pre, RECORD_PROCESSOR_EXPORTS};
use super::guest_log::Speaker;
use super::metadata::ComponentMetadata;
use super::output::{NoOutputs, OutputSink};
use super::state::KeyedState;
use super::store::{self, Limits, NoCheckpoints, SharedMemory};
use super::cache::{self, Precompiled};
use super::{CallError, Runtime, ShardInfo, ShardInstance, ShutdownReason};
use crate::records::Position;

/// Why a processor could not be loaded. Each message names the file, what is
/// wrong with it, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read processor `{path}`: {source}; check the path")]
    #[allow(missing_docs)] // fields named in the message
    Read { path: PathBuf, source: std::io::Error },

    #[error(
        "`{path}` is not a WebAssembly file (it does not start with `\\0asm`); \
         pass the .wasm component your processor build produced"
    )]
    /// The file is not WebAssembly.
    #[allow(missing_docs)] // fields named in the message
    NotWasm { path: PathBuf },

    #[error(
        "`{path}` is a core WebAssembly module, not a component; rebuild it for the \
         wasm32-wasip2 target (`cargo build --target wasm32-wasip2`), or wrap it with \
         `wasm-tools component new`"
    )]
    /// A core module, not a component.
    #[allow(missing_docs)] // fields named in the message
    CoreModule { path: PathBuf },

    /// The component does not validate.
    #[error("`{path}` is not a valid WebAssembly component: {reason}; rebuild it")]
    #[allow(missing_docs)] // fields named in the message
    Invalid { path: PathBuf, reason: String },

    #[error(
        "`{path}` starts with {needed_mib} MiB of linear memory, more than the memory limit of \
         {limit_mib} MiB; raise --memory-limit-mib (or `memory_limit_mib` in the config file) \
         to at least {needed_mib} — the component itself is fine"
    )]
    /// Its initial memory is over the memory limit.
    #[allow(missing_docs)] // fields named in the message
    MemoryLimitTooSmall { path: PathBuf, needed_mib: usize, limit_mib: usize },

    #[error(
        "`{path}` does not export `{}` (nor the older `{}`, `{}` or `{}`; its exports: {exports}); \
         implement a processor with an SDK: Rust (kcl-guest), Go, Python or JavaScript",
        RECORD_PROCESSOR_EXPORTS[0].1, RECORD_PROCESSOR_EXPORTS[1].1, RECORD_PROCESSOR_EXPORTS[2].1, RECORD_PROCESSOR_EXPORTS[3].1
    )]
    /// It exports no `record-processor`.
    #[allow(missing_docs)] // fields named in the message
    MissingExport { path: PathBuf, exports: String },

    #[error(
        "`{path}` does not fit the kcl:processor@{version} world: {reason}; rebuild it \
         against this kcl-host's WIT (wit/processor.wit)"
    )]
    /// It does not fit the contract it claims.
    #[allow(missing_docs)] // fields named in the message
    WrongWorld { path: PathBuf, version: &'static str, reason: String },
}

/// A loaded processor component, ready to instantiate once per shard.
/// Cheap to clone.
#[derive(Clone)]
pub struct Processor {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Runtime,
    /// The compiled code, for [`Processor::serialize`].
    compiled: Component,
    pre: Pre,
    /// The first 12 hex digits of the component's SHA-256.
    hash: String,
    /// `name@version` from the component's metadata, when it has them.
    component: Option<String>,
    /// What logs call it: the hash, with `(name@version)` when there is one.
    described: String,
}

impl Processor {
    /// Loads, checks and compiles the component at `path`.
    pub async fn load(runtime: &Runtime, path: &Path) -> Result<Self, LoadError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read { path: path.into(), source })?;
        Self::from_bytes(runtime, path, &bytes).await
    }

    /// Like [`Processor::load`], with the component's bytes already read;
    /// `path` is only used in messages.
    pub async fn from_bytes(runtime: &Runtime, path: &Path, bytes: &[u8]) -> Result<Self, LoadError> {
        Self::from_precompiled(runtime, path, bytes, None).await
    }

    /// Like [`Processor::from_bytes`], loading `precompiled` (when the cache
    /// has no artifact of its own) instead of compiling.
    pub async fn from_precompiled(runtime: &Runtime, path: &Path, bytes: &[u8], precompiled: Option<Precompiled>) -> Result<Self, LoadError> {
        let path = path.to_path_buf();
        check_header(&path, bytes)?;
        let component = {
            let (engine, dir) = (runtime.engine().clone(), runtime.config().cache_dir.clone());
            let bytes = bytes.to_vec();
            // Compiling takes seconds for a large component: keep it off the async workers.
            tokio::task::spawn_blocking(move || cache::compile(&engine, &bytes, dir.as_deref(), precompiled))
                .await
                .expect("the compile task does not panic")
                .map_err(|e| compile_error(&path, runtime, e))?
        };
        let (version, export) = contract(runtime, &path, &component)?;

        let linker = contract::linker(runtime).expect("the host's own imports link");
        let wrong_world = |e: wasmtime::Error| LoadError::WrongWorld { path: path.clone(), version, reason: format!("{e:#}") };
        let pre = linker.instantiate_pre(&component).map_err(wrong_world)?;
        let pre = Pre::new(version, pre).map_err(wrong_world)?;
        let hash = Self::hash_of(bytes);
        let stamped = ComponentMetadata::read(bytes).label();
        let described = stamped.as_ref().map_or_else(|| hash.clone(), |stamped| format!("{hash} ({stamped})"));
        let inner = Inner { runtime: runtime.clone(), compiled: component.clone(), pre, hash, component: stamped, described };
        let processor = Self { inner: Arc::new(inner) };

        // Export signatures are only checked when an instance is made.
        if let Err(e) = processor.instantiate("load-check", Box::new(NoCheckpoints), None).await {
            let reason = format!(
                "{e}; its record-processor has {}, where kcl-host expects \
                 initialize(shard), process-records(batch), shutdown(reason)",
                describe_functions(runtime, &component, export)
            );
            return Err(LoadError::WrongWorld { path, version, reason });
        }
        Ok(processor)
    }

    /// A fresh instance for `shard`, whose checkpoints go to `sink`.
    /// `last_checkpoint` is where the shard was last checkpointed, if at a
    /// record; checkpoints before it are refused.
    /// It has no output targets and no state: see [`Processor::instantiate_with_outputs`].
    pub async fn instantiate(
        &self,
        shard: &str,
        sink: Box<dyn CheckpointSink>,
        last_checkpoint: Option<Position>,
    ) -> Result<ShardInstance, CallError> {
        let state = KeyedState::unavailable("this instance has no state: it was started without any");
        self.instantiate_with_outputs(shard, sink, Box::new(NoOutputs), state, last_checkpoint, None).await
    }

    /// Like [`Processor::instantiate`], with what it sends going to `outputs`
    /// (flushed before each checkpoint and at the end of each call), its
    /// state in `state` (committed with each checkpoint), and its memory
    /// counted against `shared` too when it is given (a shard's instances
    /// with `--parallelism`).
    pub async fn instantiate_with_outputs(
        &self,
        shard: &str,
        sink: Box<dyn CheckpointSink>,
        outputs: Box<dyn OutputSink>,
        state: KeyedState,
        last_checkpoint: Option<Position>,
        shared: Option<Arc<SharedMemory>>,
    ) -> Result<ShardInstance, CallError> {
        let runtime = &self.inner.runtime;
        let speaker = Speaker::new(shard, self.describe());
        let mut store = store::new_store(runtime, speaker, sink, outputs, state, last_checkpoint, shared);
        let limits = Limits::of(runtime);
        match self.inner.pre.instantiate(&mut store).await {
            Ok(exports) => Ok(ShardInstance::new(store, exports, limits)),
            Err(e) => Err(limits.classify(e, &store)),
        }
    }

    /// Starts a throwaway instance and calls `initialize` on it, then
    /// `shutdown(requested)`: what a swap checks before touching any shard.
    pub async fn check_initialize(&self) -> Result<(), CallError> {
        // Its log lines say whose they are: no shard's.
        let mut instance = self.instantiate("(test instance)", Box::new(NoCheckpoints), None).await?;
        instance.initialize(&ShardInfo::new("test-instance", "test-instance")).await?;
        instance.shutdown(ShutdownReason::Requested).await
    }

    /// Its compiled code as an artifact another engine with the same
    /// [`Runtime::engine_id`] loads without compiling.
    pub fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        self.inner.compiled.serialize()
    }

    /// What [`Processor::hash`] is for the component `bytes`.
    pub fn hash_of(bytes: &[u8]) -> String {
        let mut hex = super::sha256_hex(bytes);
        hex.truncate(12);
        hex
    }

    /// Names this component in logs and metrics: the start of its SHA-256.
    pub fn hash(&self) -> &str {
        &self.inner.hash
    }

    /// `name@version`, when the component was stamped with them
    /// (`wasm-tools metadata add --name NAME --version VERSION`).
    pub fn component(&self) -> Option<&str> {
        self.inner.component.as_deref()
    }

    /// The hash, and the name and version when there are some:
    /// `9f2c1ab3d4e5 (counter@2.1.0)`.
    pub fn describe(&self) -> &str {
        &self.inner.described
    }

    /// The `kcl:processor` contract version the component implements.
    pub fn contract_version(&self) -> &'static str {
        self.inner.pre.version()
    }

    /// Refuses a processor that cannot be run with `--window`: one that
    /// does not export `kcl:processor/window@0.4.0`.
    pub fn check_closes_windows(&self) -> Result<(), String> {
        if self.inner.pre.closes_windows() {
            return Ok(());
        }
        Err(format!(
            "processor {} does not export `{}` (contract {}), so it cannot be run with --window; \
             implement `RecordProcessor::close_window` with the Rust SDK (kcl-guest) and rebuild, or run without --window",
            self.describe(),
            contract::WINDOW_EXPORT,
            self.contract_version()
        ))
    }
}

/// A compile error; a memory the pooling allocator cannot give is the
/// operator's limit, not a broken component.
fn compile_error(path: &Path, runtime: &Runtime, error: wasmtime::Error) -> LoadError {
    let reason = format!("{error:#}");
    let needed = reason
        .split_once("minimum byte size of ")
        .filter(|_| reason.contains("exceeds the limit"))
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse::<usize>().ok());
    match needed {
        Some(bytes) => LoadError::MemoryLimitTooSmall {
            path: path.into(),
            needed_mib: bytes.div_ceil(1 << 20),
            limit_mib: runtime.config().memory_limit >> 20,
        },
        None => LoadError::Invalid { path: path.into(), reason },
    }
}

fn check_header(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    const MAGIC: &[u8] = b"\0asm";
    const CORE_VERSION: &[u8] = &[1, 0, 0, 0];
    if !bytes.starts_with(MAGIC) {
        return Err(LoadError::NotWasm { path: path.into() });
    }
    if bytes.get(4..8) == Some(CORE_VERSION) {
        return Err(LoadError::CoreModule { path: path.into() });
    }
    Ok(())
}

/// The newest contract version whose `record-processor` the component
/// exports, and that export's name.
fn contract(runtime: &Runtime, path: &Path, component: &Component) -> Result<(&'static str, &'static str), LoadError> {
    let ty = component.component_type();
    for (version, export) in RECORD_PROCESSOR_EXPORTS {
        let mut exports = ty.exports(runtime.engine());
        if exports.any(|(name, item)| name == export && matches!(item.ty, ComponentItem::ComponentInstance(_))) {
            return Ok((version, export));
        }
    }
    let names: Vec<_> = ty.exports(runtime.engine()).map(|(name, _)| format!("`{name}`")).collect();
    Err(LoadError::MissingExport {
        path: path.into(),
        exports: if names.is_empty() { "none".into() } else { names.join(", ") },
    })
}

/// The functions of the component's `record-processor` export, with their
/// parameter names: `initialize(shard), ...`.
fn describe_functions(runtime: &Runtime, component: &Component, export: &str) -> String {
    let ty = component.component_type();
    let Some(ComponentItem::ComponentInstance(instance)) = ty.get_export(runtime.engine(), export).map(|e| e.ty)
    else {
        return "no functions".into();
    };
    let functions: Vec<String> = instance
        .exports(runtime.engine())
        .filter_map(|(name, export)| match export.ty {
            ComponentItem::ComponentFunc(func) => {
                let params: Vec<&str> = func.params().map(|(param, _)| param).collect();
                Some(format!("{name}({})", params.join(", ")))
            }
            _ => None,
        })
        .collect();
    functions.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checks_tell_module_from_component() {
        let p = Path::new("x.wasm");
        assert!(matches!(check_header(p, b"hello"), Err(LoadError::NotWasm { .. })));
        assert!(matches!(check_header(p, b"\0asm\x01\0\0\0"), Err(LoadError::CoreModule { .. })));
        assert!(check_header(p, b"\0asm\x0d\0\x01\0").is_ok());
    }
}
