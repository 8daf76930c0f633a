//! The fleet's deploy protocol: `kcl-host deploy` writes the wanted version
//! (stored in the component table) and the one before it to the control
//! table's `deploy` row; every worker reads that row before it starts any
//! shard, and follows it at each heartbeat read.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::Swapper;
use crate::aws::AwsError;
use crate::swap::artifact::{FleetArtifacts, Loader, KEY_VARIABLE};
use crate::swap::store::ComponentStore;
use super::deploy::{DeployRow, Deployed, Version};
use crate::lease::heartbeat::{Heartbeat, HeartbeatTable};
use crate::lease::LeaseError;
use crate::runtime::{LoadError, Processor, Runtime, RuntimeConfig};

/// The `deploy` row versions a worker acted on (so a bad one is tried once).
pub type Tried = Arc<Mutex<HashSet<String>>>;

/// A worker following the `deploy` row: loading and checking a version
/// takes seconds, so each runs in a task off the worker's loop, one at a time.
pub struct Follower {
    swapper: Arc<Swapper>,
    components: ComponentStore,
    tried: Tried,
    following: Option<tokio::task::JoinHandle<()>>,
}

impl Follower {
    /// Follows the row for `swapper`, loading versions from `components`.
    pub fn new(swapper: Arc<Swapper>, components: ComponentStore) -> Self {
        Self { swapper, components, tried: Tried::default(), following: None }
    }

    /// Before any shard starts: runs the deployed version, if there is one.
    pub async fn start(&self, deployed: Option<&Deployed>) {
        if let Some(deployed) = deployed {
            start_with_deployed(deployed, &self.swapper, &self.components, &self.tried).await;
        }
    }

    /// The row as a heartbeat read found it: follows it unless the last
    /// version is still being loaded.
    pub fn read(&mut self, deployed: Option<Deployed>) {
        let Some(deployed) = deployed.filter(|_| self.following.as_ref().is_none_or(|task| task.is_finished())) else {
            return;
        };
        let (swapper, components, tried) = (self.swapper.clone(), self.components.clone(), self.tried.clone());
        let follow = async move { follow(&deployed, &swapper, &components, &tried).await };
        self.following = Some(tokio::spawn(tracing::Instrument::in_current_span(follow)));
    }
}

/// Swaps to the version the `deploy` row names, when it is not running (and
/// was not tried already).
pub async fn follow(deployed: &Deployed, swapper: &Swapper, components: &ComponentStore, tried: &Tried) {
    let wanted = &deployed.wanted;
    if swapper.current().hash == wanted.hash || !tried.lock().expect("not poisoned").insert(wanted.hash.clone()) {
        return;
    }
    let trigger = format!("deploy {}", wanted.hash);
    let Some(loaded) = load_deployed(wanted, swapper.loader(), swapper.known(&wanted.hash), components, tried).await else { return };
    let _ = swapper.offer(loaded, wanted.source.clone(), &trigger).await;
}

/// At start, before any shard: the version the `deploy` row names, when
/// there is one, instead of the command line's (which is the fallback).
pub async fn start_with_deployed(deployed: &Deployed, swapper: &Swapper, components: &ComponentStore, tried: &Tried) {
    let (wanted, given) = (&deployed.wanted, swapper.current());
    if given.hash == wanted.hash {
        // Loaded as deployed already (`first_version` said so), or the same file.
        if given.source != wanted.source {
            tracing::info!("running {}: the command line's file is the deployed version", given.describe());
        }
        return;
    }
    tried.lock().expect("not poisoned").insert(wanted.hash.clone());
    match load_deployed(wanted, swapper.loader(), swapper.known(&wanted.hash), components, tried).await {
        Some(Ok(processor)) => {
            say_deployed(&processor, &given.describe());
            swapper.adopt(processor, wanted.source.clone());
        }
        Some(Err(e)) => tracing::error!("cannot run the deployed {}: {e}; running {} from the command line", wanted.describe(), given.describe()),
        None => tracing::warn!("running {} from the command line until the deployed {} can be loaded", given.describe(), wanted.describe()),
    }
}

/// `kcl-host run`'s first version, and where it came from: the one the
/// `deploy` row names when it is not the file at `path` and it loads — so a
/// worker started with an older file never compiles that file — else the
/// file. Failures to reach the row or load its version leave it to
/// [`start_with_deployed`], which tries again and says why.
pub async fn first_version(loader: &Loader, dynamodb: &aws_sdk_dynamodb::Client, application: &str, path: &Path) -> Result<(Processor, String), String> {
    let bytes = tokio::fs::read(path).await.map_err(|source| LoadError::Read { path: path.into(), source }.to_string())?;
    let deployed = DeployRow::new(dynamodb.clone(), application).read().await.ok().flatten();
    if let Some(wanted) = deployed.map(|d| d.wanted).filter(|wanted| wanted.hash != Processor::hash_of(&bytes)) {
        let components = ComponentStore::new(dynamodb.clone(), application);
        if let Some(Ok(processor)) = load_deployed(&wanted, loader, None, &components, &Tried::default()).await {
            say_deployed(&processor, &path.display().to_string());
            return Ok((processor, wanted.source));
        }
    }
    let processor = loader.load_bytes(path, &bytes).await.map_err(|e| e.to_string())?;
    Ok((processor, super::canonical(path)))
}

fn say_deployed(processor: &Processor, given: &str) {
    tracing::info!(
        "running {} as deployed with `kcl-host deploy` (the control table's deploy row), not {given} from the command line",
        processor.describe()
    );
}

/// Loads `wanted`: one that ran here before (`known`) is still compiled; a
/// new one comes from the component table (or the path the row names).
/// `None` when the table could not be read (tried again at the next poll).
async fn load_deployed(wanted: &Version, loader: &Loader, known: Option<Processor>, components: &ComponentStore, tried: &Tried) -> Option<Result<Processor, String>> {
    let loaded = match (known, components.hash_in(&wanted.source)) {
        (Some(known), _) => Ok(known),
        (None, Some(hash)) => match components.get(hash).await {
            Ok(Some(bytes)) => loader.load_bytes(Path::new(&wanted.source), &bytes).await.map_err(|e| e.to_string()),
            Ok(None) => Err(format!("`{}` is not in the component table: deploy it again", wanted.source)),
            Err(e) => {
                tried.lock().expect("not poisoned").remove(&wanted.hash);
                tracing::warn!("deploy {}: could not read `{}`, trying again at the next poll: {e}", wanted.hash, wanted.source);
                return None;
            }
        },
        (None, None) => loader.load(Path::new(&wanted.source)).await.map_err(|e| e.to_string()),
    };
    Some(loaded.and_then(|candidate| match candidate.hash() == wanted.hash {
        true => Ok(candidate),
        false => Err(format!("`{}` holds {}, not the deployed {}; deploy again", wanted.source, candidate.hash(), wanted.hash)),
    }))
}

/// `kcl-host deploy`: makes `processor` (or, with `None`, the version
/// before the deployed one) the version every worker of `application` runs.
/// Nothing is written — no table created — unless the file is a component
/// that initializes and the application exists. Returns what to print.
pub async fn deploy(dynamodb: &aws_sdk_dynamodb::Client, application: &str, processor: Option<&Path>) -> Result<String, String> {
    // The file and the key first: a refused deploy touches nothing.
    let fleet = FleetArtifacts::from_env(dynamodb, application)?;
    let checked = match processor {
        Some(path) => Some(checked_component(path).await?),
        None => None,
    };
    let read = match HeartbeatTable::new(dynamodb.clone(), application).read().await {
        Ok(read) => read,
        Err(LeaseError::Aws(AwsError::TableMissing(table))) => {
            return Err(format!(
                "no kcl-host application `{application}`: its control table `{table}` does not exist \
                 (`kcl-host run` creates it beside the lease table); check --application"
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let components = ComponentStore::new(dynamodb.clone(), application);
    let deployed = Deployed::in_read(&read);
    let mut compiled = String::new();
    let (wanted, previous) = match checked {
        Some((runtime, processor, bytes)) => {
            // Stored in DynamoDB, so a worker on any machine can load it.
            components.ensure().await.map_err(|e| e.to_string())?;
            components.put(processor.hash(), &bytes).await.map_err(|e| e.to_string())?;
            compiled = match fleet {
                Some(fleet) => {
                    let stored = fleet.store(&runtime, &processor, &bytes).await?;
                    format!("; its compiled code ({} KiB, sealed with {KEY_VARIABLE}) too, for workers of engine {}", stored / 1024, runtime.engine_id())
                }
                None => format!("; each worker compiles it ({KEY_VARIABLE} is not set: no compiled code is shared)"),
            };
            let wanted = stored(&components, &processor);
            let previous = match deployed.clone() {
                Some(deployed) => Some(deployed.wanted),
                None => running_version(&components, &read.heartbeats).await?,
            };
            (wanted, previous)
        }
        None => match deployed.clone() {
            Some(Deployed { wanted, previous: Some(previous) }) if components.hash_in(&previous.source).is_some() => (previous, Some(wanted)),
            Some(Deployed { previous: Some(previous), .. }) => {
                return Err(format!(
                    "cannot roll back to {}: it was loaded from `{}`, a path only its worker's machine may have, \
                     not the component table; deploy that file instead",
                    previous.describe(),
                    previous.source
                ));
            }
            _ => return Err(format!("nothing to roll back to: `{application}` has no earlier deploy")),
        },
    };
    DeployRow::new(dynamodb.clone(), application).write(&wanted, previous.as_ref()).await.map_err(|e| e.to_string())?;
    // Keep what the row names (the wanted version and the one before); the
    // version that was `previous` until now can go.
    let dropped = deployed.and_then(|d| d.previous).filter(|old| old.hash != wanted.hash && previous.as_ref().is_none_or(|p| p.hash != old.hash));
    if let Some(hash) = dropped.as_ref().and_then(|old| components.hash_in(&old.source)) {
        components.remove(hash).await.map_err(|e| e.to_string())?;
    }
    Ok(format!(
        "deployed {} from {}{compiled} to `{application}`; every worker swaps to it at its next heartbeat read{}",
        wanted.describe(),
        wanted.source,
        previous.map_or(" (no version to roll back to: the workers did not all run one from a file this machine has)".into(), |p| format!(
            " (before: {})",
            p.describe()
        ))
    ))
}

/// `kcl-host deploy`, connected as `aws` says: prints what [`deploy`] did.
pub async fn command(aws: &crate::aws::AwsSettings, application: &str, processor: Option<&Path>) -> Result<(), String> {
    let clients = crate::aws::AwsClients::from_env(aws).await.map_err(|e| e.to_string())?;
    println!("{}", deploy(&clients.dynamodb, application, processor).await?);
    Ok(())
}

/// Loads the component at `path` (with the workers' engine settings, so its
/// compiled code loads in theirs) and runs a test `initialize`.
async fn checked_component(path: &Path) -> Result<(Runtime, Processor, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let runtime = Runtime::new(RuntimeConfig { max_instances: 2, ..RuntimeConfig::default() }).map_err(|e| format!("cannot start wasmtime: {e}"))?;
    let processor = Processor::from_bytes(&runtime, path, &bytes).await.map_err(|e| e.to_string())?;
    processor.check_initialize().await.map_err(|e| format!("not deploying: its initialize failed in a test instance: {e}"))?;
    Ok((runtime, processor, bytes))
}

/// How the `deploy` row names `processor` once it is in the component table.
fn stored(components: &ComponentStore, processor: &Processor) -> Version {
    Version { hash: processor.hash().to_owned(), source: components.source(processor.hash()), component: processor.component().map(str::to_owned) }
}

/// Before the first deploy: the version every worker runs (if they agree),
/// stored in the component table when its file is readable here and holds
/// that version — so `--rollback` can bring every worker back to it.
/// `None` when there is no such version.
async fn running_version(components: &ComponentStore, heartbeats: &[Heartbeat]) -> Result<Option<Version>, String> {
    let running: BTreeSet<Version> = heartbeats.iter().filter_map(Version::running).collect();
    let [running] = &running.into_iter().collect::<Vec<_>>()[..] else { return Ok(None) };
    if components.hash_in(&running.source).is_some() {
        return Ok(Some(running.clone()));
    }
    let Ok((_, processor, bytes)) = checked_component(Path::new(&running.source)).await else { return Ok(None) };
    if processor.hash() != running.hash {
        return Ok(None);
    }
    components.put(processor.hash(), &bytes).await.map_err(|e| e.to_string())?;
    Ok(Some(stored(components, &processor)))
}
