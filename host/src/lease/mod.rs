//! Shard leases in DynamoDB, in the Java KCL's table format, and the rules
//! for taking, renewing, stealing and releasing them. A lease is renewed by
//! a write of its own (as Java KCL does) or, while only kcl-host workers own
//! leases, by its worker's heartbeat ([`coordinator::LeaseCover`]).
//!
//! This module knows nothing of WebAssembly. Its rules ([`rules`]) are pure
//! functions of the table's contents and a clock, tested against an
//! in-memory table; [`coordinator`] applies them through a [`LeaseStore`].
//! The fleet's liveness is here too: the workers' [`heartbeat`] rows in the
//! control table, and the [`watch`] that judges them.

pub mod board;
pub mod coordinator;
pub mod dynamo;
pub mod fenced;
pub mod heartbeat;
mod held;
mod key;
#[cfg(test)]
pub(crate) mod memory;
mod renewer;
mod row;
pub mod rules;
#[cfg(test)]
mod simulation;
#[cfg(test)]
mod scale;
pub mod table;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;

use crate::aws::AwsError;
pub use key::{LeaseKey, StreamIdentifier};
use crate::records::kpl::HashRange;
use crate::records::Position;
use fenced::{FencedCommit, FencedRecovery};

/// Where a shard's processing stands, as the `checkpoint` column holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checkpoint {
    /// Never processed; start at the oldest record.
    TrimHorizon,
    /// Never processed; start at the newest record.
    Latest,
    /// Never processed; start at the configured timestamp.
    AtTimestamp,
    /// Processed up to and including this record.
    At(Position),
    /// Every record was processed; the shard is closed. Never taken again.
    ShardEnd,
}

impl Checkpoint {
    /// The `checkpoint` column of a shard processed to its end.
    pub const SHARD_END: &'static str = "SHARD_END";

    /// Parses the `checkpoint` and `checkpointSubSequenceNumber` columns, in
    /// the Java KCL's sense: `(s, n)` is done up to and including user record
    /// `n` of record `s` (0 for a record that is not aggregated, and also for
    /// the first user record of an aggregate: the rest of it is not done).
    pub fn parse(text: &str, sub_sequence: u64) -> Option<Self> {
        Some(match text {
            "TRIM_HORIZON" => Self::TrimHorizon,
            "LATEST" => Self::Latest,
            "AT_TIMESTAMP" => Self::AtTimestamp,
            Self::SHARD_END => Self::ShardEnd,
            seq => Self::At(Position::new(seq, sub_sequence).ok()?),
        })
    }

    /// The `checkpoint` column's text.
    pub fn as_column(&self) -> &str {
        match self {
            Self::TrimHorizon => "TRIM_HORIZON",
            Self::Latest => "LATEST",
            Self::AtTimestamp => "AT_TIMESTAMP",
            Self::ShardEnd => Self::SHARD_END,
            Self::At(position) => position.sequence_number(),
        }
    }

    /// The `checkpointSubSequenceNumber` column.
    pub fn sub_sequence_column(&self) -> u64 {
        match self {
            Self::At(position) => position.sub_sequence_number(),
            _ => 0,
        }
    }

    /// The record processed up to, if the checkpoint is at one.
    pub fn position(&self) -> Option<&Position> {
        match self {
            Self::At(position) => Some(position),
            _ => None,
        }
    }

    /// Whether processing has moved past the initial position.
    pub fn has_started(&self) -> bool {
        matches!(self, Self::At(_) | Self::ShardEnd)
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::At(position) => position.fmt(f),
            other => f.write_str(other.as_column()),
        }
    }
}

/// One row of the lease table: one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The shard it leases (`leaseKey`; see [`LeaseKey`]).
    pub key: LeaseKey,
    /// The worker holding it (`leaseOwner`), if any.
    pub owner: Option<String>,
    /// Bumped by every write (`leaseCounter`); writes are conditional on it.
    pub counter: u64,
    /// How far the shard was processed.
    pub checkpoint: Checkpoint,
    /// `ownerSwitchesSinceCheckpoint`, kept as Java KCL keeps it.
    pub owner_switches_since_checkpoint: u64,
    /// `ParentShardId` and `AdjacentParentShardId` (`parentShardId`): the
    /// parents' lease keys.
    pub parents: BTreeSet<String>,
    /// Recorded with `SHARD_END` (`childShardIds`).
    pub children: BTreeSet<String>,
    /// The owner's heartbeat counter when it last took or renewed the lease
    /// (`ownerHeartbeat`; kcl-host's own). A worker judged dead at a counter
    /// this high or higher has stopped; one that wrote a higher counter beat
    /// again after the judgment, so its lease is not taken on it.
    pub owner_heartbeat: Option<u64>,
    /// The worker whose heartbeat `owner_heartbeat` is
    /// (`ownerHeartbeatWorker`; kcl-host's own): while it names the owner,
    /// the owner is a kcl-host worker, whether or not its heartbeat row has
    /// been read (Java KCL's writes change the owner and leave this).
    pub owner_heartbeat_worker: Option<String>,
    /// The shard's hash key range (`hashKeyRange`), for KPL aggregates across a reshard.
    pub starting_hash_key: Option<String>,
    /// The end of that range.
    pub ending_hash_key: Option<String>,
}

impl Lease {
    /// A new, unowned lease for a shard.
    pub fn new(key: impl Into<LeaseKey>, checkpoint: Checkpoint, parents: BTreeSet<String>) -> Self {
        Self {
            key: key.into(),
            owner: None,
            counter: 0,
            checkpoint,
            owner_switches_since_checkpoint: 0,
            parents,
            children: BTreeSet::new(),
            owner_heartbeat: None,
            owner_heartbeat_worker: None,
            starting_hash_key: None,
            ending_hash_key: None,
        }
    }

    /// The shard's hash-key range, when the row records it.
    pub fn hash_range(&self) -> Option<HashRange> {
        HashRange::parse(self.starting_hash_key.as_deref()?, self.ending_hash_key.as_deref()?)
    }

    /// Whether the shard was processed to its end.
    pub fn is_finished(&self) -> bool {
        self.checkpoint == Checkpoint::ShardEnd
    }

    /// Whether its owner is a kcl-host worker, as the row itself shows: the
    /// owner recorded its own heartbeat counter when it took or renewed it.
    pub fn is_owned_by_kcl_host(&self) -> bool {
        self.owner.is_some() && self.owner_heartbeat_worker == self.owner
    }

    /// Whether `worker` holds it.
    pub fn is_owned_by(&self, worker: &str) -> bool {
        self.owner.as_deref() == Some(worker)
    }
}

/// The lease table as one scan read it.
#[derive(Clone, Debug, Default)]
pub struct LeaseScan {
    /// The rows that are leases.
    pub leases: Vec<Lease>,
    /// Keys of rows that could not be read as leases.
    pub unreadable: BTreeSet<String>,
    /// Rows Java KCL 3.x keeps beside the leases (with an `entityType`
    /// other than `LEASE`: `LEADER`, `CLIENT_VERSION_MIGRATION`,
    /// `WORKER_METRIC_STATS`): left alone; they say a 3.x fleet uses the table.
    pub kcl3_rows: usize,
    /// The Java KCL 3.x workers among those rows (`WORKER_METRIC_STATS`):
    /// worker id → when it last reported (`lut`, epoch seconds on its clock).
    pub kcl3_workers: BTreeMap<String, u64>,
}

/// A lease table operation that failed for a reason other than a lost race.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The DynamoDB call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// State was to be committed to a store without transactions.
    #[error("this lease store cannot commit state with a checkpoint (it has no transactions): state needs the DynamoDB lease table")]
    NoTransactions,
}

/// The lease table. Every write that depends on ownership is conditional on
/// the lease's `leaseCounter` (fencing): a write based on a stale view
/// returns `None` (or `false`) instead of changing anything.
pub trait LeaseStore: Send + Sync + 'static {
    /// Creates the table if it is missing and waits until it is usable.
    fn ensure_table(&self) -> impl Future<Output = Result<(), LeaseError>> + Send;

    /// Every well-formed lease (possibly an eventually consistent read: the
    /// rules only ever act later on a stale row, never sooner), and the keys of
    /// rows that cannot be parsed (reported, left out, never rewritten).
    fn scan(&self) -> impl Future<Output = Result<LeaseScan, LeaseError>> + Send;

    /// Every well-formed lease.
    fn list(&self) -> impl Future<Output = Result<Vec<Lease>, LeaseError>> + Send {
        async { Ok(self.scan().await?.leases) }
    }

    /// Writes `lease` if no lease has its key; `false` if one does.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Makes `owner` the holder of `lease` as last read, recording its
    /// heartbeat counter `heartbeat` (when it keeps one).
    fn take(&self, lease: &Lease, owner: &str, heartbeat: Option<u64>) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;

    /// Bumps the counter of a lease its owner holds, recording the owner's
    /// heartbeat counter `heartbeat` (when it keeps one).
    fn renew(&self, lease: &Lease, heartbeat: Option<u64>) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;

    /// Records a checkpoint for a lease its owner holds; with `ShardEnd`, also
    /// the shard's children.
    fn checkpoint(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
        children: &BTreeSet<String>,
    ) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;

    /// Records a checkpoint for a lease its owner holds and commits `writes`
    /// (the state changes it covers) in the same atomic write; with
    /// `ShardEnd`, the shard's children too. Only the DynamoDB table has
    /// transactions; other stores refuse.
    fn commit(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
        children: &BTreeSet<String>,
        writes: &dyn FencedCommit,
    ) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send {
        let _ = (lease, checkpoint, children, writes);
        async { Err(LeaseError::NoTransactions) }
    }

    /// Finishes, through `recovery`, a commit an earlier owner of `lease`
    /// (held now by its owner) made but did not finish applying, before
    /// anything reads the shard's state; `false` if the lease was lost
    /// meanwhile. Stores without transactions never have one.
    fn recover_state(&self, lease: &Lease, recovery: &dyn FencedRecovery) -> impl Future<Output = Result<bool, LeaseError>> + Send {
        let _ = (lease, recovery);
        async { Ok(true) }
    }

    /// Clears the owner of a lease its owner holds, so others can take it at once.
    fn evict(&self, lease: &Lease) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Deletes a finished lease (only if it is still at `SHARD_END`).
    fn delete_finished(&self, key: &str) -> impl Future<Output = Result<bool, LeaseError>> + Send;
}
