//! Telling the host how far a shard has been processed.

use std::fmt;

use crate::bindings::kcl::processor::{checkpointer as wit, types::CheckpointError as WitError};
use crate::Record;

/// Why the host refused a checkpoint. Nothing was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// This worker no longer holds the shard's lease.
    LeaseLost,
    /// The position was not delivered on this shard, or is before the last checkpoint.
    InvalidSequenceNumber(String),
    /// The lease table could not be written; try again later.
    Unavailable(String),
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LeaseLost => f.write_str("the lease on this shard was lost"),
            Self::InvalidSequenceNumber(m) => write!(f, "invalid checkpoint: {m}"),
            Self::Unavailable(m) => write!(f, "checkpoint store unavailable: {m}"),
        }
    }
}

impl std::error::Error for CheckpointError {}

impl From<WitError> for CheckpointError {
    fn from(e: WitError) -> Self {
        match e {
            WitError::LeaseLost => Self::LeaseLost,
            WitError::InvalidSequenceNumber(m) => Self::InvalidSequenceNumber(m),
            WitError::Unavailable(m) => Self::Unavailable(m),
        }
    }
}

/// Records checkpoints for the shard this processor serves.
#[derive(Debug)]
pub struct Checkpointer {
    _private: (),
}

impl Checkpointer {
    pub(crate) const fn new() -> Self {
        Self { _private: () }
    }

    /// Checkpoints the last record delivered so far.
    pub fn checkpoint(&self) -> Result<(), CheckpointError> {
        wit::checkpoint().map_err(Into::into)
    }

    /// Checkpoints at `record`, which must already have been delivered.
    pub fn checkpoint_at(&self, record: &Record) -> Result<(), CheckpointError> {
        self.checkpoint_at_sequence(&record.sequence_number, record.sub_sequence_number)
    }

    /// Checkpoints at a sequence number already delivered on this shard.
    pub fn checkpoint_at_sequence(&self, sequence_number: &str, sub_sequence_number: Option<u64>) -> Result<(), CheckpointError> {
        wit::checkpoint_at(sequence_number, sub_sequence_number).map_err(Into::into)
    }
}
