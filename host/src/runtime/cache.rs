//! Compiled components cached on disk, so a restart does not recompile.
//!
//! The key is the SHA-256 of the component's bytes plus the engine's
//! precompile compatibility hash ([`engine_id`]): a new wasmtime or
//! different engine settings never read an old artifact.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::Engine;

/// A compiled component made elsewhere (by `kcl-host deploy`), loaded
/// instead of compiling when this process has none of its own.
pub struct Precompiled(Vec<u8>);

impl Precompiled {
    /// Wraps what [`Component::serialize`] wrote (see
    /// [`super::Processor::serialize`]).
    ///
    /// # Safety
    /// wasmtime runs the machine code in `artifact` as it is: it checks only
    /// that an engine like this one made it. The caller vouches that a party
    /// it trusts did (`crate::swap::artifact` checks a MAC sealed with the
    /// fleet's key).
    pub unsafe fn trusted(artifact: Vec<u8>) -> Self {
        Self(artifact)
    }
}

/// Compiles `bytes`, or reads the artifact an earlier compile left in `dir`,
/// or loads `precompiled` (keeping it in `dir` too).
pub(crate) fn compile(engine: &Engine, bytes: &[u8], dir: Option<&Path>, precompiled: Option<Precompiled>) -> wasmtime::Result<Component> {
    // Seconds for a large component: say so rather than go quiet.
    let compiling = || tracing::info!("compiling the component ({} KiB){}", bytes.len() / 1024, dir.map_or(String::new(), |d| format!("; kept in {} for later runs", d.display())));
    let path = dir.map(|dir| artifact_path(engine, bytes, dir));
    if let Some(path) = path.as_ref().filter(|path| path.exists()) {
        // SAFETY: files under the cache directory are written only by
        // `keep` below, from `Component::serialize` or a `Precompiled`, and
        // wasmtime checks the artifact's header against this engine.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => return Ok(component),
            Err(e) => tracing::warn!(path = %path.display(), "ignoring unusable cached component: {e}"),
        }
    }
    if let Some(Precompiled(artifact)) = precompiled {
        // SAFETY: `Precompiled::trusted`'s caller vouched for it.
        match unsafe { Component::deserialize(engine, &artifact) } {
            Ok(component) => {
                path.inspect(|path| keep(&artifact, path));
                return Ok(component);
            }
            Err(e) => tracing::warn!("the fleet's compiled artifact does not load in this engine, compiling instead: {e}"),
        }
    }
    compiling();
    let component = Component::new(engine, bytes)?;
    if let Some(path) = &path {
        match component.serialize() {
            Ok(artifact) => keep(&artifact, path),
            Err(e) => tracing::warn!("could not serialize the compiled component: {e}"),
        }
    }
    Ok(component)
}

/// Whether `dir` holds this engine's artifact of `bytes`.
pub(crate) fn is_cached(engine: &Engine, bytes: &[u8], dir: &Path) -> bool {
    artifact_path(engine, bytes, dir).exists()
}

/// Names the engine's compiled code: artifacts of engines with one id load
/// in each other (its target, compiler settings, features and wasmtime version).
pub(crate) fn engine_id(engine: &Engine) -> String {
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn artifact_path(engine: &Engine, bytes: &[u8], dir: &Path) -> PathBuf {
    dir.join(format!("{}-{}.cwasm", super::sha256_hex(bytes), engine_id(engine)))
}

/// Writes `artifact` to `path` atomically (a crash mid-write never leaves a
/// torn file); a failure costs only a compile at the next start.
fn keep(artifact: &[u8], path: &Path) {
    let write = || -> std::io::Result<()> {
        let dir = path.parent().expect("artifact paths have a parent");
        std::fs::create_dir_all(dir)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, artifact)?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        tracing::warn!(path = %path.display(), "could not cache the compiled component: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_compile_reads_the_cached_artifact() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let wat = "(component)";
        let bytes = wat::parse_str(wat).unwrap();
        compile(&engine, &bytes, Some(dir.path()), None).unwrap();
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "one artifact written");
        let path = artifact_path(&engine, &bytes, dir.path());
        let written = std::fs::metadata(&path).unwrap().modified().unwrap();
        compile(&engine, &bytes, Some(dir.path()), None).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), written, "not rewritten");
    }

    #[test]
    fn a_corrupt_artifact_is_replaced() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let bytes = wat::parse_str("(component)").unwrap();
        let path = artifact_path(&engine, &bytes, dir.path());
        std::fs::write(&path, b"garbage").unwrap();
        compile(&engine, &bytes, Some(dir.path()), None).unwrap();
        assert_ne!(std::fs::read(&path).unwrap(), b"garbage");
    }

    #[test]
    fn a_precompiled_artifact_is_loaded_and_kept_and_one_from_another_engine_is_compiled_over() {
        let engine = Engine::default();
        let bytes = wat::parse_str("(component (core module))").unwrap();
        let artifact = Component::new(&engine, &bytes).unwrap().serialize().unwrap();
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: made just above by this engine.
        compile(&engine, &bytes, Some(dir.path()), Some(unsafe { Precompiled::trusted(artifact.clone()) })).unwrap();
        assert_eq!(std::fs::read(artifact_path(&engine, &bytes, dir.path())).unwrap(), artifact, "kept as given");

        let mut config = wasmtime::Config::new();
        config.cranelift_opt_level(wasmtime::OptLevel::None);
        let other = Engine::new(&config).unwrap();
        assert_ne!(engine_id(&other), engine_id(&engine));
        // SAFETY: a real artifact, of another engine: wasmtime refuses it.
        compile(&other, &bytes, Some(dir.path()), Some(unsafe { Precompiled::trusted(artifact) })).unwrap();
        assert!(is_cached(&other, &bytes, dir.path()), "compiled and cached under its own engine id");
    }
}
