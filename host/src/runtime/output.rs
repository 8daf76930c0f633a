//! The guest's `output` import: records sent to targets the operator
//! declared. The runtime only queues and flushes through an [`OutputSink`]
//! supplied by the caller (the real targets in `kcl-host run`, a printout in
//! `kcl-host replay`); it calls [`OutputSink::flush`] before every checkpoint
//! and at the end of every call, so no checkpoint is ever ahead of the
//! outputs of the records it covers.

use std::future::Future;
use std::pin::Pin;

pub use super::bindings::v0_4::kcl::processor::output::{Records as OutputRecords, SendError};

/// The future an [`OutputSink`] returns.
pub type OutputFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a shard's outputs go.
pub trait OutputSink: Send {
    /// Queues `records` for the target named `target` (waiting for room
    /// when the worker's output buffer is full); refuses an unknown name or
    /// a record the target cannot take, and then queues none of them.
    fn send(&mut self, target: String, records: OutputRecords) -> OutputFuture<'_, Result<(), SendError>>;

    /// Writes everything queued so far and waits for every target to
    /// acknowledge it; on error (a target that kept failing) says which
    /// target and why. What was not written stays queued.
    fn flush(&mut self) -> OutputFuture<'_, Result<(), String>>;

    /// Drops what is queued: the call that sent it failed, and its input will
    /// be delivered again (and sent again).
    fn discard(&mut self);
}

/// A shard with no output targets: every send names the fix.
pub struct NoOutputs;

impl OutputSink for NoOutputs {
    fn send(&mut self, target: String, _: OutputRecords) -> OutputFuture<'_, Result<(), SendError>> {
        Box::pin(async move {
            Err(SendError::UnknownTarget(format!(
                "no output target `{target}`: no outputs are declared; declare it with --output {target}=URI"
            )))
        })
    }

    fn flush(&mut self) -> OutputFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn discard(&mut self) {}
}

impl OutputRecords {
    /// How many records.
    pub fn len(&self) -> usize {
        self.data_ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.data_ends.is_empty()
    }

    /// Record `i`: (data, partition key, explicit hash key), or why the
    /// columns do not describe one. Cutting a string column only checks
    /// that the cut falls on character boundaries (the column is UTF-8 already).
    pub fn get(&self, i: usize) -> Result<(&[u8], &str, Option<&str>), String> {
        let data = range(&self.data_ends, i)
            .and_then(|r| self.data.get(r))
            .ok_or_else(|| format!("record {i}: `data-ends` is out of order or past `data`"))?;
        let key = range(&self.partition_key_ends, i)
            .and_then(|r| self.partition_keys.get(r))
            .ok_or_else(|| format!("record {i}: `partition-key-ends` does not cut `partition-keys` there (a column shorter than `data-ends`?)"))?;
        let hash_key = if self.explicit_hash_key_ends.is_empty() {
            None
        } else {
            let cut = range(&self.explicit_hash_key_ends, i)
                .and_then(|r| self.explicit_hash_keys.get(r))
                .ok_or_else(|| format!("record {i}: `explicit-hash-key-ends` does not cut `explicit-hash-keys` there"))?;
            (!cut.is_empty()).then_some(cut)
        };
        Ok((data, key, hash_key))
    }
}

/// `ends[i-1]..ends[i]` (from 0 for the first), when the ends allow it.
fn range(ends: &[u32], i: usize) -> Option<std::ops::Range<usize>> {
    let start = if i == 0 { 0 } else { *ends.get(i - 1)? as usize };
    let end = *ends.get(i)? as usize;
    (start <= end).then_some(start..end)
}
