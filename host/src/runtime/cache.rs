//! Compiled components cached on disk, so a restart does not recompile.
//!
//! The key is the SHA-256 of the component's bytes plus the engine's
//! precompile compatibility hash: a new wasmtime or different engine
//! settings never read an old artifact.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

/// Compiles `bytes`, or reads the artifact an earlier compile left in `dir`.
pub(crate) fn compile(engine: &Engine, bytes: &[u8], dir: Option<&Path>) -> wasmtime::Result<Component> {
    // Seconds for a large component: say so rather than go quiet.
    let compiling = || tracing::info!("compiling the component ({} KiB){}", bytes.len() / 1024, dir.map_or(String::new(), |d| format!("; kept in {} for later runs", d.display())));
    let Some(dir) = dir else {
        compiling();
        return Component::new(engine, bytes);
    };
    let path = artifact_path(engine, bytes, dir);
    if path.exists() {
        // SAFETY: files under the cache directory are written only by
        // `store` below from `Component::serialize`, and wasmtime checks the
        // artifact's header against this engine before using it.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => return Ok(component),
            Err(e) => tracing::warn!(path = %path.display(), "ignoring unusable cached component: {e}"),
        }
    }
    compiling();
    let component = Component::new(engine, bytes)?;
    if let Err(e) = store(&component, &path) {
        tracing::warn!(path = %path.display(), "could not cache the compiled component: {e}");
    }
    Ok(component)
}

fn artifact_path(engine: &Engine, bytes: &[u8], dir: &Path) -> PathBuf {
    let digest = Sha256::digest(bytes);
    let mut engine_hash = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut engine_hash);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{hex}-{:016x}.cwasm", engine_hash.finish()))
}

/// Writes the artifact atomically: a crash mid-write never leaves a torn file.
fn store(component: &Component, path: &Path) -> wasmtime::Result<()> {
    let dir = path.parent().expect("artifact paths have a parent");
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, component.serialize()?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
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
        compile(&engine, &bytes, Some(dir.path())).unwrap();
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "one artifact written");
        let path = artifact_path(&engine, &bytes, dir.path());
        let written = std::fs::metadata(&path).unwrap().modified().unwrap();
        compile(&engine, &bytes, Some(dir.path())).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), written, "not rewritten");
    }

    #[test]
    fn a_corrupt_artifact_is_replaced() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let bytes = wat::parse_str("(component)").unwrap();
        let path = artifact_path(&engine, &bytes, dir.path());
        std::fs::write(&path, b"garbage").unwrap();
        compile(&engine, &bytes, Some(dir.path())).unwrap();
        assert_ne!(std::fs::read(&path).unwrap(), b"garbage");
    }
}
