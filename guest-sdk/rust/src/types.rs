//! The Rust view of what the host hands a processor.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bindings::kcl::processor::types as wit;

/// One Kinesis record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The payload as the producer wrote it.
    pub data: Vec<u8>,
    pub partition_key: String,
    pub sequence_number: String,
    /// Set for a user record de-aggregated from a KPL aggregate record.
    pub sub_sequence_number: Option<u64>,
    /// When Kinesis accepted the record.
    pub approximate_arrival: SystemTime,
    pub explicit_hash_key: Option<String>,
}

/// Records in shard order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub records: Vec<Record>,
    /// How far this batch is behind the tip of the shard.
    pub millis_behind_latest: u64,
}

/// The shard a processor serves and where delivery starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    pub stream_name: String,
    pub shard_id: String,
    /// The last checkpointed sequence number, or `TRIM_HORIZON` / `LATEST` /
    /// `AT_TIMESTAMP` for a shard never checkpointed.
    pub starting_checkpoint: String,
    pub starting_sub_sequence_number: Option<u64>,
}

/// Why a processor is being shut down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownReason {
    /// Every record of the shard was delivered; the host writes `SHARD_END`
    /// once `shutdown` returns `Ok`.
    ShardEnd,
    /// Another worker holds the lease now; checkpoints are refused.
    LeaseLost,
    /// The worker is stopping or swapping the processor; checkpoints still work.
    Requested,
}

/// How a processor call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessorError {
    /// Transient: the host delivers the same batch again after a backoff.
    Retryable(String),
    /// The host drops this instance and starts a fresh one from the last
    /// checkpoint, after a backoff.
    Fatal(String),
}

impl ProcessorError {
    /// A transient failure: deliver the same batch again.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::Retryable(message.into())
    }

    /// A failure this instance cannot recover from.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::Fatal(message.into())
    }
}

impl fmt::Display for ProcessorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Retryable(m) => write!(f, "retryable: {m}"),
            Self::Fatal(m) => write!(f, "fatal: {m}"),
        }
    }
}

/// Any error turned into a [`ProcessorError`] with `?` is fatal.
impl<E: std::error::Error> From<E> for ProcessorError {
    fn from(error: E) -> Self {
        Self::Fatal(error.to_string())
    }
}

impl From<wit::KinesisRecord> for Record {
    fn from(r: wit::KinesisRecord) -> Self {
        Self {
            data: r.data,
            partition_key: r.partition_key,
            sequence_number: r.sequence_number,
            sub_sequence_number: r.sub_sequence_number,
            approximate_arrival: UNIX_EPOCH + Duration::from_millis(r.approximate_arrival_timestamp_ms),
            explicit_hash_key: r.explicit_hash_key,
        }
    }
}

impl From<wit::Batch> for Batch {
    fn from(b: wit::Batch) -> Self {
        Self {
            records: b.records.into_iter().map(Record::from).collect(),
            millis_behind_latest: b.millis_behind_latest,
        }
    }
}

impl From<wit::ShardInfo> for ShardInfo {
    fn from(s: wit::ShardInfo) -> Self {
        Self {
            stream_name: s.stream_name,
            shard_id: s.shard_id,
            starting_checkpoint: s.starting_checkpoint,
            starting_sub_sequence_number: s.starting_sub_sequence_number,
        }
    }
}

impl From<wit::ShutdownReason> for ShutdownReason {
    fn from(r: wit::ShutdownReason) -> Self {
        match r {
            wit::ShutdownReason::ShardEnd => Self::ShardEnd,
            wit::ShutdownReason::LeaseLost => Self::LeaseLost,
            wit::ShutdownReason::Requested => Self::Requested,
        }
    }
}

impl From<ProcessorError> for wit::ProcessorError {
    fn from(e: ProcessorError) -> Self {
        match e {
            ProcessorError::Retryable(m) => Self::Retryable(m),
            ProcessorError::Fatal(m) => Self::Fatal(m),
        }
    }
}
