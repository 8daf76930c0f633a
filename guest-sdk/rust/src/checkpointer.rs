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

    /// Checkpoints the last record delivered so far (in `shutdown`: the last
    /// record of the last batch that returned `Ok`).
    pub fn checkpoint(&self) -> Result<(), CheckpointError> {
        wit::checkpoint().map_err(Into::into)
    }

    /// Checkpoints at `record`, which must already have been delivered.
    pub fn checkpoint_at(&self, record: &Record<'_>) -> Result<(), CheckpointError> {
        self.checkpoint_at_sequence(record.sequence_number, record.sub_sequence_number)
    }

    /// Checkpoints at record `index` of the batch being processed (the
    /// cheapest form: nothing to parse on the host side).
    pub fn checkpoint_at_index(&self, index: usize) -> Result<(), CheckpointError> {
        let index = u32::try_from(index).map_err(|_| CheckpointError::InvalidSequenceNumber(format!("no record {index}")))?;
        wit::checkpoint_at_index(index).map_err(Into::into)
    }

    /// Checkpoints at a sequence number already delivered on this shard.
    /// Without a sub-sequence number, a KPL aggregate counts as done in full
    /// when it is in the current batch.
    pub fn checkpoint_at_sequence(&self, sequence_number: &str, sub_sequence_number: Option<u64>) -> Result<(), CheckpointError> {
        wit::checkpoint_at(sequence_number, sub_sequence_number).map_err(Into::into)
    }
}
