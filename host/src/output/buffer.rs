//! One shard's queue of outputs: what its processor sent and no target
//! has acknowledged yet, kept as the columns each `send` gave (no copy per
//! record). Every shard of a worker shares one byte budget
//! (`--output-buffer-mib`): a send that does not fit first flushes the
//! shard's own queue, then waits for room — the shard slows down, nothing
//! is dropped. A shard holding its fair share (the budget over the queues
//! alive) writes its own queue before it takes more, so a shard that sends
//! much in one long call waits on its own writes, never holds the others'
//! sends until its call ends.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::record::OutRecord;
use super::{Declared, Outputs};
use crate::runtime::{OutputFuture, OutputRecords, OutputSink, SendError};

/// The budget counts in units of this many bytes.
pub(super) const UNIT: usize = 1024;

/// A shard's outputs, queued until flushed.
pub struct ShardOutputs {
    outputs: Arc<Outputs>,
    /// Per target name, each send's columns in the order sent.
    queued: BTreeMap<String, Vec<OutputRecords>>,
    /// The budget the queue holds.
    held: Option<OwnedSemaphorePermit>,
}

/// The records of checked sends, in order.
fn records(sends: &[OutputRecords]) -> Vec<OutRecord<'_>> {
    sends.iter().flat_map(|send| (0..send.len()).map(move |i| view(send, i).expect("checked when it was sent"))).collect()
}

/// Record `i` of a send.
fn view(send: &OutputRecords, i: usize) -> Result<OutRecord<'_>, String> {
    let (data, partition_key, explicit_hash_key) = send.get(i)?;
    Ok(OutRecord { data, partition_key, explicit_hash_key })
}

/// Bytes a send holds.
fn size(send: &OutputRecords) -> usize {
    send.data.len() + send.partition_keys.len() + send.explicit_hash_keys.len()
}

impl ShardOutputs {
    pub(super) fn new(outputs: Arc<Outputs>) -> Self {
        outputs.queues.fetch_add(1, Ordering::Relaxed);
        Self { outputs, queued: BTreeMap::new(), held: None }
    }

    /// The units one queue may hold before it writes itself out.
    fn fair_share(&self) -> usize {
        self.outputs.budget_units / self.outputs.queues.load(Ordering::Relaxed).max(1)
    }

    /// Checks every record of `send` against `target`.
    fn check(send: &OutputRecords, target: &Declared) -> Result<(), SendError> {
        for i in 0..send.len() {
            let record = view(send, i).map_err(SendError::Invalid)?;
            target.target.check(&record).map_err(|e| SendError::Invalid(format!("record {i} for `{}`: {e}", target.name)))?;
        }
        Ok(())
    }

    /// Takes `units` of the worker's budget, flushing this shard's own
    /// queue first when that would pass its fair share, or when the budget
    /// is short.
    async fn reserve(&mut self, units: u32) {
        let held = self.held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        if held + units as usize > self.fair_share()
            && !self.queued.is_empty()
            && let Err(e) = self.write_queued().await
        {
            tracing::warn!("this shard's outputs are over its share of the output buffer and could not be written: {e}");
        }
        let budget = self.outputs.budget.clone();
        let permit = match budget.clone().try_acquire_many_owned(units) {
            Ok(permit) => permit,
            Err(_) => {
                if !self.queued.is_empty()
                    && let Err(e) = self.write_queued().await
                {
                    tracing::warn!("the output buffer is full and this shard's outputs could not be written: {e}; waiting for room");
                }
                budget.acquire_many_owned(units).await.expect("the budget is never closed")
            }
        };
        match &mut self.held {
            Some(held) => held.merge(permit),
            None => self.held = Some(permit),
        }
        self.outputs.buffer_changed();
    }

    /// Writes every target's queue; the acknowledged ones leave it.
    async fn write_queued(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        for (name, sends) in std::mem::take(&mut self.queued) {
            let declared = self.outputs.target(&name).expect("only a known target is queued");
            match declared.write(&records(&sends)).await {
                Ok(()) => self.release(sends.iter().map(size).sum()),
                Err(e) => {
                    errors.push(e);
                    self.queued.insert(name, sends);
                }
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }

    /// Gives `bytes` of budget back.
    fn release(&mut self, bytes: usize) {
        if self.queued.is_empty() {
            self.held = None;
        } else if let Some(held) = &mut self.held {
            let units = (bytes / UNIT).min(held.num_permits().saturating_sub(1));
            drop(held.split(units));
        }
        self.outputs.buffer_changed();
    }
}

impl Drop for ShardOutputs {
    fn drop(&mut self) {
        self.outputs.queues.fetch_sub(1, Ordering::Relaxed);
    }
}

impl OutputSink for ShardOutputs {
    fn send(&mut self, target: String, records: OutputRecords) -> OutputFuture<'_, Result<(), SendError>> {
        Box::pin(async move {
            let declared = self.outputs.target(&target).map_err(SendError::UnknownTarget)?;
            Self::check(&records, &declared)?;
            let bytes = size(&records);
            let units = bytes.div_ceil(UNIT).max(1);
            if units > self.outputs.budget_units {
                return Err(SendError::Invalid(format!(
                    "{bytes} bytes in one send are more than the output buffer of {} MiB; send fewer at a time, or raise --output-buffer-mib",
                    (self.outputs.budget_units * UNIT) >> 20
                )));
            }
            self.reserve(units as u32).await;
            self.queued.entry(target).or_default().push(records);
            Ok(())
        })
    }

    fn flush(&mut self) -> OutputFuture<'_, Result<(), String>> {
        Box::pin(self.write_queued())
    }

    fn discard(&mut self) {
        self.queued.clear();
        self.held = None;
        self.outputs.buffer_changed();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::output::file::Lines;

    /// One record of `bytes` bytes.
    fn send_of(bytes: usize) -> OutputRecords {
        OutputRecords {
            data: vec![b'x'; bytes],
            data_ends: vec![bytes as u32],
            partition_keys: "k".into(),
            partition_key_ends: vec![1],
            explicit_hash_keys: String::new(),
            explicit_hash_key_ends: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_shard_past_its_share_writes_its_own_queue_so_another_never_waits_for_its_call() {
        let outputs = Arc::new(Outputs::new(vec![("out".into(), Box::new(Lines::Discard) as Box<dyn crate::output::target::Target>)], 64 * UNIT, None));
        let (mut long_call, mut other) = (outputs.shard(), outputs.shard());
        // One call sends nearly the whole budget and does not return (no flush).
        for _ in 0..60 {
            long_call.send("out".into(), send_of(UNIT)).await.unwrap();
        }
        let held = |queue: &ShardOutputs| queue.held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        assert!(held(&long_call) <= 32, "it kept to its half: {}", held(&long_call));
        // The other shard's sends find room at once.
        let sends = async {
            for _ in 0..30 {
                other.send("out".into(), send_of(UNIT)).await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(5), sends).await.expect("the other shard never waits for the long call to end");
        assert!(held(&other) <= 32, "it keeps to its half too: {}", held(&other));
    }
}
