//! How a call into a processor can fail.

use std::time::Duration;

use super::CheckpointError;

/// Why a call into a processor failed. Only the shard it serves is affected.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum CallError {
    /// The processor asked for the same input again later.
    #[error("processor returned a retryable error: {0}")]
    Retryable(String),
    /// The processor said it cannot go on.
    #[error("processor returned a fatal error: {0}")]
    Fatal(String),
    /// The batch failed at record `index`; the records before it are done.
    #[error("processor failed at record {index} of the batch: {reason}")]
    #[allow(missing_docs)] // fields named in the message
    FailedAt { index: u32, reason: String },
    /// The call succeeded (or failed part-way), but what it sent could not
    /// be written to its target: not the processor's failure.
    #[error("the outputs could not be written: {0}")]
    OutputsUnwritten(String),
    /// The call ran past the configured deadline and was stopped.
    #[error("processor call ran longer than its deadline of {0:?} and was stopped")]
    DeadlineExceeded(Duration),
    /// The processor tried to grow its memory past the cap.
    #[error(
        "processor needed more memory than its limit of {} MiB (with --parallelism, the limit of all the \
         shard's instances together) and was stopped; if it needs more, raise --memory-limit-mib", .0 >> 20
    )]
    MemoryLimit(usize),
    /// The processor trapped (a panic, an `unreachable`, a bad memory access...).
    #[error("processor trapped: {0}")]
    Trap(String),
    /// The call succeeded, but its state changes could not be committed
    /// (`window.close`): they are dropped, and the call is made again.
    #[error("what the call changed could not be committed: {0:?}")]
    Uncommitted(CheckpointError),
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
        matches!(self, CallError::Retryable(_) | CallError::Fatal(_) | CallError::FailedAt { .. } | CallError::OutputsUnwritten(_) | CallError::Uncommitted(_))
    }

    /// The error in one line: a trap's cause without its wasm backtrace
    /// (the log has the whole of it), for a dead letter and `status`.
    pub fn summary(&self) -> String {
        match self {
            CallError::Trap(detail) => {
                let cause = detail.lines().rev().map(str::trim).find(|line| !line.is_empty()).unwrap_or_default();
                format!("processor trapped: {cause}")
            }
            other => other.to_string(),
        }
    }

    /// Whether the processor failed on its input (an error it returned, a
    /// trap, a deadline, the memory cap): what the failure policy counts.
    /// A withdrawn call or outputs that could not be written are not the
    /// input's fault.
    pub fn is_processing_failure(&self) -> bool {
        !matches!(self, CallError::Withdrawn | CallError::OutputsUnwritten(_) | CallError::Uncommitted(_))
    }
}
