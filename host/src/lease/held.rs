//! A lease this worker holds: its validity (its own renewals and this
//! worker's heartbeat), its fenced checkpoint writes, and one renewal.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
// tokio's clock: the lease simulation runs it paused, as a virtual clock.
use tokio::time::Instant;

use tokio::sync::{watch, Mutex};

use super::rules::TakeSettings;
use super::{Checkpoint, Lease, LeaseKey, LeaseStore};
use super::fenced::{FencedCommit, FencedRecovery};

/// Why a checkpoint write did not happen.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CheckpointFailure {
    /// Another worker holds the lease now, or its validity ran out.
    #[error("the lease is no longer held by this worker")]
    LeaseLost,
    /// The write failed; the lease may still be held.
    #[error("the lease table could not be written: {0}")]
    Unavailable(String),
}

/// This worker's heartbeat. Other kcl-host workers take every lease of a
/// worker whose heartbeat stopped for the failover time, so no lease is
/// valid once the heartbeat is that old. Before the first heartbeat (and
/// where none is kept, as in unit tests) only the lease's own renewals count.
///
/// In heartbeat mode (every owner in the table is a kcl-host worker with a
/// heartbeat) the heartbeat also renews every lease: each successful beat
/// extends every lease still valid when it was sent, and no lease is
/// renewed on its own.
///
/// A worker whose heartbeat lapsed may have been judged dead by a read
/// that missed its next beat, and a reader acts on that judgment until its
/// next read. So each take and renewal records the heartbeat counter in the
/// lease row ([`super::Lease::owner_heartbeat`]): the others take a dead
/// worker's lease only if the row's counter is no newer than the one they
/// judged dead. After a lapse, a lease is not valid again until a write
/// records a counter from after it (the *epoch*).
#[derive(Debug)]
pub struct Liveness {
    beats: StdMutex<Beats>,
    failover_time: Duration,
    heartbeat_leases: AtomicBool,
}

/// What this worker's heartbeat writes have told it.
#[derive(Debug, Default)]
struct Beats {
    /// The last successful beat's send time plus the failover time.
    valid_until: Option<Instant>,
    /// Its heartbeat counter after the last successful beat.
    counter: Option<u64>,
    /// The counter of the first beat after the last lapse: leases whose row
    /// records an older one are not valid.
    epoch: Option<u64>,
}

impl Beats {
    fn is_valid(&self, now: Instant) -> bool {
        self.valid_until.is_none_or(|until| now < until)
    }

    fn covers(&self, heartbeat: Option<u64>) -> bool {
        self.epoch.is_none_or(|epoch| heartbeat.is_some_and(|h| h >= epoch))
    }
}

impl Liveness {
    /// No heartbeat yet: only the leases' own renewals count.
    pub(super) fn new(failover_time: Duration) -> Self {
        Self { beats: StdMutex::new(Beats::default()), failover_time, heartbeat_leases: AtomicBool::new(false) }
    }

    fn beats(&self) -> std::sync::MutexGuard<'_, Beats> {
        self.beats.lock().expect("not poisoned")
    }

    /// Whether this worker keeps a heartbeat (it wrote one).
    pub fn keeps_heartbeat(&self) -> bool {
        self.beats().valid_until.is_some()
    }

    /// The heartbeat counter of the last successful beat, to record in the
    /// lease rows this worker writes.
    pub fn counter(&self) -> Option<u64> {
        self.beats().counter
    }

    /// Whether a lease row recording `heartbeat` may be delivered on: it is
    /// no older than the last lapse.
    pub(super) fn covers(&self, heartbeat: Option<u64>) -> bool {
        self.beats().covers(heartbeat)
    }

    /// Whether a lease whose row records `heartbeat` may be delivered on at
    /// `now`: [`Self::is_valid`] and [`Self::covers`] under one lock, for the
    /// check made at every epoch tick and host call of a processor.
    fn admits(&self, now: Instant, heartbeat: Option<u64>) -> bool {
        let beats = self.beats();
        beats.is_valid(now) && beats.covers(heartbeat)
    }

    /// Whether the heartbeat renews the leases now (rather than a write per lease).
    pub fn heartbeat_leases(&self) -> bool {
        self.heartbeat_leases.load(Ordering::Relaxed)
    }

    /// Sets heartbeat mode; `true` when that changed it.
    pub(super) fn set_heartbeat_leases(&self, on: bool) -> bool {
        self.heartbeat_leases.swap(on, Ordering::Relaxed) != on
    }

    /// Records a heartbeat write that succeeded, sent at `sent`, that left
    /// the counter at `counter`; `true` when it starts a new epoch (the
    /// first beat, or one so late that a reader may have judged this worker
    /// dead on a read that missed it: one landing within a
    /// [`super::watch::read_deadline`] of the validity's end).
    pub fn beat(&self, sent: Instant, counter: u64) -> bool {
        let landed = Instant::now();
        let mut beats = self.beats();
        let lapsed = beats.valid_until.is_none_or(|until| landed + super::watch::read_deadline(self.failover_time) >= until);
        if lapsed {
            beats.epoch = Some(counter);
        }
        beats.valid_until = Some(sent + self.failover_time);
        beats.counter = Some(counter);
        lapsed
    }

    /// No lease is valid any more (another process took this worker's id):
    /// only a later successful beat, which will not come, could change that.
    pub fn revoke(&self) {
        self.beats().valid_until = Some(Instant::now());
    }

    /// Whether the last heartbeat is recent enough (or none is kept).
    pub fn is_valid(&self, now: Instant) -> bool {
        self.beats().is_valid(now)
    }
}

/// A lease this worker holds, shared by the coordinator (which renews it)
/// and the shard's consumer (which checkpoints through it). Writes are
/// serialized so each one is conditional on the counter the last one left.
pub struct HeldLease<S> {
    /// Unique per take: a lease taken again is a new `HeldLease`.
    id: u64,
    key: LeaseKey,
    store: Arc<S>,
    pub(super) lease: Mutex<Lease>,
    /// After this instant another worker may consider the lease expired:
    /// the last successful write's send time plus the failover time.
    pub(super) valid_until: StdMutex<Instant>,
    /// The heartbeat counter the row records (see [`Liveness`]).
    row_heartbeat: StdMutex<Option<u64>>,
    lost: watch::Sender<bool>,
    /// A stolen lease may still look valid to its previous owner until one
    /// failover time after the steal: delivery waits until then.
    deliver_after: Instant,
    stolen: bool,
    liveness: Arc<Liveness>,
    settings: TakeSettings,
}

impl<S: LeaseStore> HeldLease<S> {
    pub(super) fn new(id: u64, store: Arc<S>, lease: Lease, sent: Instant, stolen: bool, liveness: Arc<Liveness>, settings: TakeSettings) -> Self {
        Self {
            id,
            liveness,
            deliver_after: if stolen { sent + settings.failover_time } else { sent },
            stolen,
            key: lease.key.clone(),
            store,
            valid_until: StdMutex::new(sent + settings.failover_time),
            row_heartbeat: StdMutex::new(lease.owner_heartbeat),
            lease: Mutex::new(lease),
            lost: watch::channel(false).0,
            settings,
        }
    }

    /// The lease's key.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// Tells this take of the lease from any other take of the same shard.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this take stole the lease from a live worker.
    pub fn was_stolen(&self) -> bool {
        self.stolen
    }

    /// The lease as last written by this worker.
    pub async fn snapshot(&self) -> Lease {
        self.lease.lock().await.clone()
    }

    /// When delivery may start: at once, or for a stolen lease once the
    /// previous owner has surely stopped.
    pub fn deliver_after(&self) -> Instant {
        self.deliver_after
    }

    /// Whether records may still be delivered: not lost, renewed (and
    /// heartbeat) recently enough that no other worker can have taken it,
    /// and its row records a heartbeat from after the last lapse.
    pub fn is_valid(&self) -> bool {
        let now = Instant::now();
        !*self.lost.borrow()
            && now < *self.valid_until.lock().expect("not poisoned")
            && self.liveness.admits(now, *self.row_heartbeat.lock().expect("not poisoned"))
    }

    /// Whether the row records a heartbeat from before the last lapse: a
    /// renewal must record a newer one before the lease is valid again.
    pub(super) fn behind_epoch(&self) -> bool {
        !self.liveness.covers(*self.row_heartbeat.lock().expect("not poisoned"))
    }

    /// A heartbeat sent at `sent` was written: in heartbeat mode it renews
    /// this lease, if the lease was still valid then (a lapse is not
    /// bridged: the next renewal, conditional on the counter, decides).
    pub(super) fn cover(&self, sent: Instant) {
        let mut until = self.valid_until.lock().expect("not poisoned");
        if *until > sent {
            *until = (*until).max(sent + self.settings.failover_time);
        }
    }

    /// Whether the lease stays valid until at least `instant` as things are.
    pub(super) fn valid_through(&self, instant: Instant) -> bool {
        *self.valid_until.lock().expect("not poisoned") > instant
    }

    /// Whether the last successful write was sent after `instant`.
    pub(super) fn written_after(&self, instant: Instant) -> bool {
        *self.valid_until.lock().expect("not poisoned") > instant + self.settings.failover_time
    }

    /// Resolves once the lease is lost.
    pub fn lost(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }

    pub(super) fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    /// Writes a checkpoint, fenced by owner and counter.
    pub async fn checkpoint(&self, checkpoint: Checkpoint, children: &BTreeSet<String>) -> Result<(), CheckpointFailure> {
        self.write_checkpoint(checkpoint, children, None).await
    }

    /// Writes a checkpoint (with `ShardEnd`, the shard's `children` too) and
    /// commits `writes` with it, in one write fenced by owner and counter.
    pub async fn commit(&self, checkpoint: Checkpoint, children: &BTreeSet<String>, writes: &dyn FencedCommit) -> Result<(), CheckpointFailure> {
        self.write_checkpoint(checkpoint, children, Some(writes)).await
    }

    async fn write_checkpoint(&self, checkpoint: Checkpoint, children: &BTreeSet<String>, writes: Option<&dyn FencedCommit>) -> Result<(), CheckpointFailure> {
        let mut lease = self.lease.lock().await;
        if !self.is_valid() {
            return Err(CheckpointFailure::LeaseLost);
        }
        let sent = Instant::now();
        let written = match writes {
            Some(writes) => self.store.commit(&lease, &checkpoint, children, writes).await,
            None => self.store.checkpoint(&lease, &checkpoint, children).await,
        };
        match written {
            Ok(Some(updated)) => {
                self.written(&mut lease, updated, sent);
                Ok(())
            }
            Ok(None) => {
                self.mark_lost();
                Err(CheckpointFailure::LeaseLost)
            }
            Err(e) => Err(CheckpointFailure::Unavailable(e.to_string())),
        }
    }

    /// Finishes, through `recovery`, a state commit an earlier owner made
    /// and did not apply (see `state::log`), before the shard's state is read.
    pub async fn recover_state(&self, recovery: &dyn FencedRecovery) -> Result<(), CheckpointFailure> {
        let lease = self.lease.lock().await;
        match self.store.recover_state(&lease, recovery).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.mark_lost();
                Err(CheckpointFailure::LeaseLost)
            }
            Err(e) => Err(CheckpointFailure::Unavailable(e.to_string())),
        }
    }

    /// Keeps the row a successful write left, and extends validity from when
    /// that write was sent.
    fn written(&self, lease: &mut Lease, updated: Lease, sent: Instant) {
        *self.row_heartbeat.lock().expect("not poisoned") = updated.owner_heartbeat;
        *lease = updated;
        *self.valid_until.lock().expect("not poisoned") = sent + self.settings.failover_time;
    }

    /// Bumps the counter.
    async fn renew(&self) -> Renewal {
        let mut lease = self.lease.lock().await;
        // Without a heartbeat the others take this lease anyway.
        if *self.lost.borrow() || !self.liveness.is_valid(Instant::now()) {
            return Renewal::Lost;
        }
        let sent = Instant::now();
        match self.store.renew(&lease, self.liveness.counter()).await {
            Ok(Some(updated)) => {
                self.written(&mut lease, updated, sent);
                Renewal::Renewed
            }
            Ok(None) => Renewal::Lost,
            Err(e) => {
                tracing::warn!(shard = %self.key, "could not renew the lease: {e}");
                Renewal::Failed
            }
        }
    }
}

/// Renews `lease`, giving up when its validity ends (a write still out
/// then cannot save it).
pub(super) async fn renew_by_deadline<S: LeaseStore>(lease: Arc<HeldLease<S>>) -> (Renewal, Arc<HeldLease<S>>) {
    let deadline = *lease.valid_until.lock().expect("not poisoned");
    let renewal = tokio::time::timeout_at(deadline, lease.renew()).await.unwrap_or(Renewal::Failed);
    (renewal, lease)
}

/// How one renewal went.
pub(super) enum Renewal {
    Renewed,
    /// Taken by another worker, or not renewable in time.
    Lost,
    /// The write failed; the lease is lost only once its validity runs out.
    Failed,
}

