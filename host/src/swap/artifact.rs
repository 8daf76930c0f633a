//! Compiled components shared by a fleet. Compiling a large component (the
//! Python or JavaScript interpreter, about 20 MB) takes seconds on every
//! worker at every start with an empty cache. `kcl-host deploy` compiles it
//! once anyway (its checks load it), so it stores the compiled artifact
//! beside the component in the component table ([`super::store`]), and a
//! worker whose engine has the same id ([`Runtime::engine_id`]: target,
//! compiler settings, wasmtime version) loads that in milliseconds.
//!
//! Compiled code runs natively, outside the sandbox, so an artifact is never
//! trusted for being in the table. `deploy` seals it with an HMAC-SHA256
//! under the fleet's key ([`KEY_VARIABLE`], a secret the deployer and the
//! workers share) over the component's SHA-256, the engine id and the
//! stored bytes; a worker loads only an artifact whose seal checks under its
//! own key, and compiles otherwise. Without the key nothing is stored or
//! loaded. wasmtime checks the artifact's header against its engine as well.
//!
//! An artifact is stored deflated (a third of its size: fewer rows to read)
//! under `<hash>@<engine id>`, its head row holding `sha256` (the
//! component's, hex) and `seal` (B).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::store::ComponentStore;
use crate::aws::AwsError;
use crate::lease::table::Item;
use crate::lease::LeaseError;
use crate::runtime::{sha256_hex, LoadError, Precompiled, Processor, Runtime};

/// The environment variable holding the fleet's key.
pub const KEY_VARIABLE: &str = "KCL_HOST_ARTIFACT_KEY";

/// Fewest bytes a key may have: a key is as strong as it is long.
const MIN_KEY_BYTES: usize = 32;

/// The fleet's key for sealing compiled artifacts.
#[derive(Clone)]
pub struct ArtifactKey(Arc<[u8]>);

impl std::fmt::Debug for ArtifactKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArtifactKey(..)")
    }
}

impl ArtifactKey {
    /// The key in [`KEY_VARIABLE`], if it is set; a key too short is refused.
    pub fn from_env() -> Result<Option<Self>, String> {
        std::env::var_os(KEY_VARIABLE).map(|key| Self::new(key.as_encoded_bytes())).transpose()
    }

    /// `key`, when it has at least [`MIN_KEY_BYTES`] bytes.
    pub fn new(key: &[u8]) -> Result<Self, String> {
        match key.len() >= MIN_KEY_BYTES {
            true => Ok(Self(key.into())),
            false => Err(format!(
                "{KEY_VARIABLE} has {} bytes; a key sealing compiled code needs at least {MIN_KEY_BYTES} \
                 (e.g. `openssl rand -hex 32`)",
                key.len()
            )),
        }
    }

    /// The seal of `stored` as the artifact of the component `sha256` for the engine `engine`.
    fn mac(&self, sha256: &str, engine: &str, stored: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        // Lengths first, so no two (sha256, engine) pairs read as one.
        for part in [sha256.as_bytes(), engine.as_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(stored);
        mac
    }
}

/// The fleet's compiled artifacts: the component table and the key.
#[derive(Clone, Debug)]
pub struct FleetArtifacts {
    components: ComponentStore,
    key: ArtifactKey,
}

impl FleetArtifacts {
    /// Artifacts in `components`, sealed with `key`.
    pub fn new(components: ComponentStore, key: ArtifactKey) -> Self {
        Self { components, key }
    }

    /// The artifacts of `application`, when [`KEY_VARIABLE`] holds a key.
    pub fn from_env(dynamodb: &aws_sdk_dynamodb::Client, application: &str) -> Result<Option<Self>, String> {
        Ok(ArtifactKey::from_env()?.map(|key| Self::new(ComponentStore::new(dynamodb.clone(), application), key)))
    }

    /// Stores `processor`'s compiled code as the artifact of `component`
    /// (its bytes) for `runtime`'s engine; returns the bytes stored.
    pub async fn store(&self, runtime: &Runtime, processor: &Processor, component: &[u8]) -> Result<usize, String> {
        let artifact = processor.serialize().map_err(|e| format!("cannot serialize the compiled component: {e}"))?;
        let mut encoder = DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        let stored = encoder.write_all(&artifact).and_then(|()| encoder.finish()).expect("deflating into memory does not fail");
        let (sha256, engine) = (sha256_hex(component), runtime.engine_id());
        let seal = self.key.mac(&sha256, &engine, &stored).finalize().into_bytes();
        let head = Item::from([
            ("sha256".to_owned(), AttributeValue::S(sha256)),
            ("seal".to_owned(), AttributeValue::B(Blob::new(seal.to_vec()))),
        ]);
        self.components.put_artifact(processor.hash(), &engine, &stored, head).await.map_err(|e| e.to_string())?;
        Ok(stored.len())
    }

    /// The artifact of `component` (its bytes) for `runtime`'s engine, when
    /// one is stored and its seal checks; says in the log why one is not used.
    pub async fn fetch(&self, runtime: &Runtime, component: &[u8]) -> Option<Precompiled> {
        let (sha256, engine) = (sha256_hex(component), runtime.engine_id());
        let hash = &sha256[..12]; // as `Processor::hash` names it
        let (head, stored) = match self.components.get_artifact(hash, &engine).await {
            Ok(Some(found)) => found,
            Ok(None) | Err(LeaseError::Aws(AwsError::TableMissing(_))) => {
                tracing::info!("no compiled artifact of {hash} for this engine ({engine}) in the component table: compiling it here");
                return None;
            }
            Err(e) => {
                tracing::warn!("cannot read the compiled artifact of {hash}, compiling it here: {e}");
                return None;
            }
        };
        // Tens of milliseconds of hashing and inflating: off the async workers,
        // which may be running shards (a deploy followed mid-stream).
        let (key, of) = (self.key.clone(), sha256.clone());
        let opened = tokio::task::spawn_blocking(move || open(&key, &of, &engine, &head, &stored)).await.expect("opening does not panic");
        let artifact = match opened {
            Ok(artifact) => artifact,
            Err(why) => {
                tracing::warn!("the component table's compiled artifact of {hash} {why}: ignoring it and compiling here");
                return None;
            }
        };
        tracing::info!("loading the compiled artifact of {hash} that `kcl-host deploy` stored ({} KiB, seal checked)", artifact.len() / 1024);
        // SAFETY: sealed under the fleet's key by `kcl-host deploy`, from
        // `Processor::serialize` of this very component and engine id.
        Some(unsafe { Precompiled::trusted(artifact) })
    }
}

/// Loads components for one runtime: compiled from its cache, from the
/// fleet's artifacts (with a key), or compiled here.
#[derive(Clone)]
pub struct Loader {
    runtime: Runtime,
    fleet: Option<FleetArtifacts>,
}

impl Loader {
    /// Loads for `runtime`, with `fleet`'s artifacts when given.
    pub fn new(runtime: Runtime, fleet: Option<FleetArtifacts>) -> Self {
        Self { runtime, fleet }
    }

    /// Loads and checks the component at `path`.
    pub async fn load(&self, path: &Path) -> Result<Processor, LoadError> {
        let bytes = tokio::fs::read(path).await.map_err(|source| LoadError::Read { path: path.into(), source })?;
        self.load_bytes(path, &bytes).await
    }

    /// Like [`Self::load`], with the component's bytes already read; `path`
    /// is only used in messages.
    pub async fn load_bytes(&self, path: &Path, bytes: &[u8]) -> Result<Processor, LoadError> {
        let precompiled = match &self.fleet {
            Some(fleet) if !self.runtime.has_compiled(bytes) => fleet.fetch(&self.runtime, bytes).await,
            _ => None,
        };
        Processor::from_precompiled(&self.runtime, path, bytes, precompiled).await
    }
}

/// The artifact `stored` under `head`, once its seal checks under `key` as
/// the compiled code of the component `sha256` for the engine `engine`;
/// `Err` says what is wrong with it.
fn open(key: &ArtifactKey, sha256: &str, engine: &str, head: &Item, stored: &[u8]) -> Result<Vec<u8>, String> {
    let checked = match (head.get("sha256"), head.get("seal")) {
        (Some(AttributeValue::S(of)), Some(AttributeValue::B(seal))) if of == sha256 => key.mac(sha256, engine, stored).verify_slice(seal.as_ref()).is_ok(),
        _ => false,
    };
    if !checked {
        return Err(format!("is not sealed with this worker's {KEY_VARIABLE} (deploy with the same key as the workers)"));
    }
    let mut artifact = Vec::with_capacity(stored.len() * 3);
    DeflateDecoder::new(stored).read_to_end(&mut artifact).map_err(|e| format!("does not inflate: {e}"))?;
    Ok(artifact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_key_is_refused_and_a_seal_binds_key_component_engine_and_bytes() {
        assert!(ArtifactKey::new(b"short").unwrap_err().contains("at least 32"));
        let key = ArtifactKey::new(&[7; 32]).unwrap();
        let seal = key.mac("abc", "e1", b"code").finalize().into_bytes();
        assert!(key.mac("abc", "e1", b"code").verify_slice(&seal).is_ok());
        for (sha, engine, bytes) in [("abd", "e1", &b"code"[..]), ("abc", "e2", b"code"), ("abc", "e1", b"cod3"), ("abce", "1", b"code")] {
            assert!(key.mac(sha, engine, bytes).verify_slice(&seal).is_err(), "{sha} {engine}");
        }
        let other = ArtifactKey::new(&[8; 32]).unwrap();
        assert!(other.mac("abc", "e1", b"code").verify_slice(&seal).is_err(), "another key");
    }
}
