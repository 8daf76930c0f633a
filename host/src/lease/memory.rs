//! An in-memory [`LeaseStore`] with the same conditional semantics as the
//! DynamoDB one, for fast rule tests.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use super::{Checkpoint, Lease, LeaseError, LeaseKey, LeaseScan, LeaseStore};
use crate::aws::AwsError;

#[derive(Clone, Default)]
pub(crate) struct MemoryStore {
    rows: Arc<Mutex<BTreeMap<LeaseKey, Lease>>>,
    /// Keys whose takes fail with a service error (fault injection).
    failing_takes: Arc<Mutex<HashSet<LeaseKey>>>,
    /// Keys of rows that scans report as unreadable.
    unreadable: Arc<Mutex<BTreeSet<String>>>,
    /// While set, scans wait for it to be lifted (a slow table).
    scans_held: Arc<tokio::sync::watch::Sender<bool>>,
    /// Java KCL 3.x metrics rows: worker → last update (epoch seconds).
    kcl3_workers: Arc<Mutex<BTreeMap<String, u64>>>,
    /// Requests per operation, as DynamoDB would bill them (one per call).
    requests: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl MemoryStore {
    /// Applies `change` to the stored row if it still has `expected`'s counter
    /// (and owner), returning the new row.
    fn update(&self, expected: &Lease, owner_must_match: bool, change: impl FnOnce(&mut Lease)) -> Option<Lease> {
        let mut rows = self.rows.lock().unwrap();
        let row = rows.get_mut(&expected.key)?;
        if row.counter != expected.counter || (owner_must_match && row.owner != expected.owner) {
            return None;
        }
        change(row);
        row.counter += 1;
        Some(row.clone())
    }

    fn count(&self, operation: &'static str) {
        *self.requests.lock().unwrap().entry(operation).or_default() += 1;
    }

    /// Requests per operation so far: `scan`, `take`, `renew`, `checkpoint`, `evict`, `create`.
    pub(crate) fn requests(&self) -> BTreeMap<&'static str, u64> {
        self.requests.lock().unwrap().clone()
    }

    pub(crate) fn get(&self, key: &str) -> Option<Lease> {
        self.rows.lock().unwrap().get(key).cloned()
    }

    /// Adds a row that cannot be read as a lease.
    pub(crate) fn add_unreadable(&self, key: &str) {
        self.unreadable.lock().unwrap().insert(key.to_owned());
    }

    /// Adds Java KCL 3.x's metrics row of `worker`, last updated now.
    pub(crate) fn add_kcl3_worker(&self, worker: &str) {
        self.kcl3_workers.lock().unwrap().insert(worker.to_owned(), crate::clock::unix_ms() / 1000);
    }

    /// Makes scans wait until [`MemoryStore::release_scans`].
    pub(crate) fn hold_scans(&self) {
        self.scans_held.send_replace(true);
    }

    pub(crate) fn release_scans(&self) {
        self.scans_held.send_replace(false);
    }

    /// Makes every take of `key` fail as an unavailable table would.
    pub(crate) fn fail_takes_of(&self, key: &str) {
        self.failing_takes.lock().unwrap().insert(key.into());
    }
}

impl LeaseStore for MemoryStore {
    async fn ensure_table(&self) -> Result<(), LeaseError> {
        Ok(())
    }

    async fn scan(&self) -> Result<LeaseScan, LeaseError> {
        let _ = self.scans_held.subscribe().wait_for(|held| !held).await;
        self.count("scan");
        let leases = self.rows.lock().unwrap().values().cloned().collect();
        let kcl3_workers = self.kcl3_workers.lock().unwrap().clone();
        Ok(LeaseScan { leases, unreadable: self.unreadable.lock().unwrap().clone(), kcl3_rows: kcl3_workers.len(), kcl3_workers })
    }

    async fn create(&self, lease: &Lease) -> Result<bool, LeaseError> {
        self.count("create");
        let mut rows = self.rows.lock().unwrap();
        if rows.contains_key(&lease.key) {
            return Ok(false);
        }
        rows.insert(lease.key.clone(), lease.clone());
        Ok(true)
    }

    async fn take(&self, lease: &Lease, owner: &str, heartbeat: Option<u64>) -> Result<Option<Lease>, LeaseError> {
        self.count("take");
        if self.failing_takes.lock().unwrap().contains(&lease.key) {
            let message = "injected failure".to_owned();
            return Err(AwsError::Service { operation: "UpdateItem (take lease)", code: "InternalServerError".into(), message }.into());
        }
        Ok(self.update(lease, false, |row| {
            if row.owner.as_deref() != Some(owner) {
                row.owner_switches_since_checkpoint += 1;
            }
            row.owner = Some(owner.to_owned());
            row.owner_heartbeat = heartbeat;
            row.owner_heartbeat_worker = heartbeat.map(|_| owner.to_owned());
        }))
    }

    async fn renew(&self, lease: &Lease, heartbeat: Option<u64>) -> Result<Option<Lease>, LeaseError> {
        self.count("renew");
        Ok(self.update(lease, true, |row| {
            row.owner_heartbeat = heartbeat;
            row.owner_heartbeat_worker = heartbeat.and(row.owner.clone());
        }))
    }

    async fn checkpoint(&self, lease: &Lease, checkpoint: &Checkpoint, children: &BTreeSet<String>) -> Result<Option<Lease>, LeaseError> {
        self.count("checkpoint");
        Ok(self.update(lease, true, |row| {
            row.checkpoint = checkpoint.clone();
            row.owner_switches_since_checkpoint = 0;
            if !children.is_empty() {
                row.children = children.clone();
            }
        }))
    }

    async fn evict(&self, lease: &Lease) -> Result<bool, LeaseError> {
        self.count("evict");
        Ok(self.update(lease, true, |row| row.owner = None).is_some())
    }

    async fn delete_finished(&self, key: &str) -> Result<bool, LeaseError> {
        let mut rows = self.rows.lock().unwrap();
        if rows.get(key).is_some_and(Lease::is_finished) {
            rows.remove(key);
            return Ok(true);
        }
        Ok(false)
    }
}
