//! Where a new processor version comes from: SIGHUP (the same path read
//! again), `--watch` (the path's file changed), the admin listener's
//! `POST /swap`, or the control table's `deploy` row (`kcl-host deploy`). Each is checked the same way before any shard sees it —
//! the load checks of start-up plus a test instance's `initialize` — and
//! offered to the worker, which rolls it out (`worker::deploy`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::records::Batch;
use crate::replay;
use crate::runtime::bindings::ShardInfo;
use crate::runtime::{Processor, Runtime};

/// Checks new versions and offers them to the worker.
pub struct Swapper {
    runtime: Runtime,
    /// `--swap-canary-input`: records every new version must replay without error first.
    canary_input: Option<Batch>,
    offers: watch::Sender<Processor>,
    /// Where the version offered last was loaded from.
    source: std::sync::Mutex<String>,
}

impl Swapper {
    /// `processor`, loaded from `source`, is the version running now.
    pub fn new(runtime: Runtime, processor: Processor, source: &Path) -> Self {
        let source = std::fs::canonicalize(source).unwrap_or_else(|_| source.to_path_buf()).display().to_string();
        Self { runtime, canary_input: None, offers: watch::channel(processor).0, source: std::sync::Mutex::new(source) }
    }

    /// Every new version must first replay `records` (its whole lifecycle,
    /// in a throwaway instance) without error.
    pub fn with_canary_input(self, records: Batch) -> Self {
        Self { canary_input: Some(records), ..self }
    }

    /// The version offered last: its hash, and where it came from (what the
    /// heartbeat row reports, so `kcl-host deploy --rollback` can return to it).
    pub fn current(&self) -> (String, String) {
        (self.current_hash(), self.source.lock().expect("not poisoned").clone())
    }

    /// The worker's end: the current version, and each one offered.
    pub fn subscribe(&self) -> watch::Receiver<Processor> {
        self.offers.subscribe()
    }

    /// The start of the running version's SHA-256.
    pub fn current_hash(&self) -> String {
        self.offers.borrow().hash().to_owned()
    }

    /// Loads and checks the component at `path` without offering it.
    pub async fn load(&self, path: &Path) -> Result<Processor, String> {
        Processor::load(&self.runtime, path).await.map_err(|e| e.to_string())
    }

    /// Loads `path` and offers it; `Err` says why it was refused (and nothing changed).
    pub async fn offer_path(&self, path: &Path, trigger: &str) -> Result<String, String> {
        let loaded = self.load(path).await;
        let offered = self.offer_loaded(loaded, trigger).await;
        if offered.is_ok() {
            *self.source.lock().expect("not poisoned") = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string();
        }
        offered
    }

    /// Offers a component given as bytes (`POST /swap` with the file as its body).
    pub async fn offer_bytes(&self, bytes: &[u8], trigger: &str) -> Result<String, String> {
        let loaded = Processor::from_bytes(&self.runtime, Path::new("the posted component"), bytes).await.map_err(|e| e.to_string());
        let offered = self.offer_loaded(loaded, trigger).await;
        if offered.is_ok() {
            *self.source.lock().expect("not poisoned") = "(posted to /swap)".into();
        }
        offered
    }

    /// Checks a loaded component with a test `initialize` and offers it.
    pub async fn offer_loaded(&self, loaded: Result<Processor, String>, trigger: &str) -> Result<String, String> {
        let current = self.offers.borrow().clone();
        let result = match loaded {
            Err(e) => Err(format!("not swapping, the shards keep running {}: {e}", current.describe())),
            Ok(candidate) if candidate.hash() == current.hash() => Ok(format!("{} is the processor already running", current.describe())),
            Ok(candidate) => match self.check(&candidate).await {
                Err(e) => Err(format!("not swapping to {}, {e}", candidate.describe())),
                Ok(()) => {
                    let message = format!("swapping from {} to {}", current.describe(), candidate.describe());
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

    /// A test `initialize`, and the canary input's replay when there is one.
    async fn check(&self, candidate: &Processor) -> Result<(), String> {
        candidate.check_initialize().await.map_err(|e| format!("its initialize failed in a test instance: {e}"))?;
        let Some(records) = &self.canary_input else { return Ok(()) };
        let shard = ShardInfo {
            stream_name: "swap-canary-input".into(),
            shard_id: "swap-canary-input".into(),
            starting_checkpoint: "TRIM_HORIZON".into(),
            starting_sub_sequence_number: None,
        };
        replay::replay(candidate, shard, records.clone(), 500, false)
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
