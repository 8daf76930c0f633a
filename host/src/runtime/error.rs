//! How a call into a processor can fail.

use std::time::Duration;

/// Why a call into a processor failed. Only the shard it serves is affected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CallError {
    /// The processor asked for the same input again later.
    #[error("processor returned a retryable error: {0}")]
    Retryable(String),
    /// The processor said it cannot go on.
    #[error("processor returned a fatal error: {0}")]
    Fatal(String),
    /// The call ran past the configured deadline and was stopped.
    #[error("processor call ran longer than its deadline of {0:?} and was stopped")]
    DeadlineExceeded(Duration),
    /// The processor tried to grow its memory past the cap.
    #[error(
        "processor needed more memory than its limit of {} MiB and was stopped; if it needs more, \
         raise --memory-limit-mib", .0 >> 20
    )]
    MemoryLimit(usize),
    /// The processor trapped (a panic, an `unreachable`, a bad memory access...).
    #[error("processor trapped: {0}")]
    Trap(String),
    /// The caller withdrew the call while it ran (see
    /// [`ShardInstance::withdraw_when`](super::ShardInstance::withdraw_when));
    /// its result would not have been used.
    #[error("processor call was stopped: its result could no longer be used")]
    Withdrawn,
}

impl CallError {
    /// Whether the same instance may be called again (the processor itself
    /// returned the error); after any other error the instance is unusable.
    pub fn instance_survives(&self) -> bool {
        matches!(self, CallError::Retryable(_) | CallError::Fatal(_))
    }
}
