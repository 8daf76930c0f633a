//! Where a new processor version comes from: SIGHUP (the same path read
//! again), `--watch` (the path's file changed), the admin listener's
//! `POST /swap`, or the control table's `deploy` row (`kcl-host deploy`). Each is checked the same way before any shard sees it —
//! the load checks of start-up plus a test instance's `initialize` — and
//! offered to the worker, which rolls it out ([`rollout`]); [`fleet`] is
//! the `deploy` row's protocol.

pub mod artifact;
pub mod deploy;
pub mod fleet;
pub mod rollout;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use deploy::Version;
use crate::records::Batch;
use crate::replay;
use crate::output::{OutputSpec, Outputs};
use crate::runtime::ShardInfo;
use crate::runtime::Processor;

/// How many versions a worker keeps compiled for a `deploy` to return to.
const KNOWN_VERSIONS: usize = 4;

/// Checks new versions and offers them to the worker.
pub struct Swapper {
    loader: artifact::Loader,
    /// `--swap-canary-input`: records every new version must replay without error first.
    canary_input: Option<Batch>,
    /// The declared outputs, taking a canary input's sends without writing them.
    canary_outputs: Option<Arc<Outputs>>,
    offers: watch::Sender<Processor>,
    /// The versions offered last, with where each came from: a `deploy` of
    /// one that ran here before (a rollback) swaps back to it without
    /// loading anything.
    known: std::sync::Mutex<Vec<(Processor, String)>>,
    /// The version the worker settled on (not one still on its canary, nor
    /// one it rolled back), and its source: what the heartbeat reports.
    settled: std::sync::Mutex<Version>,
    /// The version on trial (on its canary or on probation), if any.
    trial: std::sync::Mutex<Option<String>>,
    /// `--window`: a new version must close windows too.
    closes_windows: bool,
}

impl Swapper {
    /// `processor`, loaded from `source` (a path as [`canonical`] gives it,
    /// or the `deploy` row's), is the version running now; new versions are
    /// loaded by `loader`.
    pub fn new(loader: artifact::Loader, processor: Processor, source: String) -> Self {
        let settled = std::sync::Mutex::new(version(&processor, &source));
        let known = std::sync::Mutex::new(vec![(processor.clone(), source)]);
        Self { loader, canary_input: None, canary_outputs: None, offers: watch::channel(processor).0, known, settled, trial: Default::default(), closes_windows: false }
    }

    /// With `windows` (`--window`), a new version that cannot close windows is refused.
    pub fn closing_windows(self, windows: bool) -> Self {
        Self { closes_windows: windows, ..self }
    }

    /// Every new version must first replay `records` (its whole lifecycle,
    /// in a throwaway instance) without error.
    pub fn with_canary_input(self, records: Batch, outputs: &[OutputSpec]) -> Self {
        Self { canary_input: Some(records), canary_outputs: Some(Outputs::discarding(outputs)), ..self }
    }

    /// The version the worker runs, and where it came from (what the
    /// heartbeat row reports, so `kcl-host deploy --rollback` can return to it).
    pub fn current(&self) -> Version {
        self.settled.lock().expect("not poisoned").clone()
    }

    /// Where the worker's rollout stands: the version it settled on (rolled
    /// out, or rolled back to) and the one on trial, if any.
    pub fn record_rollout(&self, settled: &Processor, trial: Option<&Processor>) {
        let known = self.known.lock().expect("not poisoned");
        if let Some((p, source)) = known.iter().find(|(p, _)| p.hash() == settled.hash()) {
            *self.settled.lock().expect("not poisoned") = version(p, source);
        }
        *self.trial.lock().expect("not poisoned") = trial.map(|p| p.hash().to_owned());
    }

    /// Runs `processor`, loaded from `source`, from the start instead of the
    /// one given to [`Self::new`]: the version the fleet was told to run
    /// (`kcl-host deploy`), found before the worker started any shard.
    pub fn adopt(&self, processor: Processor, source: String) {
        *self.settled.lock().expect("not poisoned") = version(&processor, &source);
        self.remember(processor.clone(), source);
        self.offers.send_replace(processor);
    }

    /// The worker's end: the current version, and each one offered.
    pub fn subscribe(&self) -> watch::Receiver<Processor> {
        self.offers.subscribe()
    }

    /// A version offered here before, still compiled.
    pub fn known(&self, hash: &str) -> Option<Processor> {
        self.known.lock().expect("not poisoned").iter().find(|(p, _)| p.hash() == hash).map(|(p, _)| p.clone())
    }

    /// What loads new versions.
    pub fn loader(&self) -> &artifact::Loader {
        &self.loader
    }

    /// Loads and checks the component at `path` without offering it.
    pub async fn load(&self, path: &Path) -> Result<Processor, String> {
        self.loader.load(path).await.map_err(|e| e.to_string())
    }

    /// Checks the component `bytes` (named `name` in messages) without offering it.
    pub async fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<Processor, String> {
        self.loader.load_bytes(Path::new(name), bytes).await.map_err(|e| e.to_string())
    }

    /// Loads `path` and offers it; `Err` says why it was refused (and nothing changed).
    pub async fn offer_path(&self, path: &Path, trigger: &str) -> Result<String, String> {
        let loaded = self.load(path).await;
        self.offer(loaded, canonical(path), trigger).await
    }

    /// Offers a component given as bytes (`POST /swap` with the file as its body).
    pub async fn offer_bytes(&self, bytes: &[u8], trigger: &str) -> Result<String, String> {
        let loaded = self.load_bytes("the posted component", bytes).await;
        self.offer(loaded, "(posted to /swap)".into(), trigger).await
    }

    /// Checks a loaded component (from `source`) with a test `initialize`
    /// and offers it; `Err` says why it was refused.
    pub async fn offer(&self, loaded: Result<Processor, String>, source: String, trigger: &str) -> Result<String, String> {
        // What the shards settled on: after a rollback, not the version offered last.
        let settled = self.current().hash;
        let current = self.known(&settled).unwrap_or_else(|| self.offers.borrow().clone());
        let trial = self.trial.lock().expect("not poisoned").clone();
        let result = match loaded {
            Err(e) => Err(format!("not swapping, the shards keep running {}: {e}", current.describe())),
            Ok(candidate) if trial.as_deref() == Some(candidate.hash()) => Ok(format!("{} is being rolled out already", candidate.describe())),
            Ok(candidate) if candidate.hash() == current.hash() && trial.is_none() => {
                Ok(format!("{} is the processor already running", current.describe()))
            }
            // The latest offer wins: the settled version again calls the trial off (it was checked before).
            Ok(candidate) if candidate.hash() == current.hash() => {
                self.offers.send_replace(candidate);
                Ok(format!("back to {}: the version on trial is called off", current.describe()))
            }
            Ok(candidate) => match self.check(&candidate).await {
                Err(e) => Err(format!("not swapping to {}, {e}", candidate.describe())),
                Ok(()) => {
                    let message = format!("swapping from {} to {}", current.describe(), candidate.describe());
                    self.remember(candidate.clone(), source);
                    self.offers.send_replace(candidate);
                    Ok(message)
                }
            },
        };
        match &result {
            Ok(message) => tracing::info!("{trigger}: {message}"),
            Err(message) => tracing::error!("{trigger}: {message}"),
        }
        result
    }

    /// Notes `processor` as the newest known version.
    fn remember(&self, processor: Processor, source: String) {
        let mut known = self.known.lock().expect("not poisoned");
        known.retain(|(p, _)| p.hash() != processor.hash());
        known.push((processor, source));
        if known.len() > KNOWN_VERSIONS {
            known.remove(0);
        }
    }

    /// A test `initialize`, and the canary input's replay when there is one.
    async fn check(&self, candidate: &Processor) -> Result<(), String> {
        if self.closes_windows {
            candidate.check_closes_windows()?;
        }
        candidate.check_initialize().await.map_err(|e| format!("its initialize failed in a test instance: {e}"))?;
        let Some(records) = &self.canary_input else { return Ok(()) };
        let shard = ShardInfo::new("swap-canary-input", "swap-canary-input");
        let outputs = self.canary_outputs.as_ref().expect("set with the canary input");
        // Its state is its own: a canary never reads or changes the fleet's.
        let sinks = replay::ReplaySinks { print_checkpoints: false, outputs, state: &Arc::default(), window: None };
        replay::replay(candidate, shard, records.clone(), 500, sinks, None)
            .await
            .map(|_| ())
            .map_err(|e| format!("it failed on --swap-canary-input: {e}"))
    }

    /// SIGHUP reloads the processor from `path`, until the process ends.
    pub async fn on_signal(self: Arc<Self>, path: PathBuf) {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else { return };
        while hangup.recv().await.is_some() {
            let _ = self.offer_path(&path, "SIGHUP").await;
        }
    }

    /// `--watch`: reloads the processor when the file at `path` changes.
    /// The path is looked at (through symlinks) every second, so a file
    /// replaced by a rename or a symlink swap (a Kubernetes ConfigMap
    /// update) is seen too; a change is acted on once the file has stayed
    /// the same for a second.
    pub async fn on_change(self: Arc<Self>, path: PathBuf) {
        use std::os::unix::fs::MetadataExt;
        let look = |path: &Path| std::fs::metadata(path).ok().map(|m| (m.ino(), m.dev(), m.len(), m.mtime(), m.mtime_nsec()));
        let mut seen = look(&path);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let now = look(&path);
            if now == seen || now.is_none() {
                continue;
            }
            // Debounce: a copy in progress changes again before the next look.
            tick.tick().await;
            if look(&path) != now {
                continue;
            }
            seen = now;
            let _ = self.offer_path(&path, "--watch").await;
        }
    }
}

/// How the control table names `processor`, loaded from `source`.
fn version(processor: &Processor, source: &str) -> Version {
    Version { hash: processor.hash().to_owned(), source: source.to_owned(), component: processor.component().map(str::to_owned) }
}

/// `path` made absolute and free of symlinks, when it can be: what a
/// heartbeat reports as the version's source.
pub fn canonical(path: &Path) -> String {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string()
}
