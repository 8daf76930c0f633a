//! One processor instance serving one shard: the three calls of the
//! `record-processor` export, each under the runtime's limits.

use std::sync::Arc;

use wasmtime::Store;

use super::contract::Exports;
use super::guest_log;
use super::store::{Limits, ShardState};
use super::{CallError, CheckpointError, ProcessorError, ShardInfo, ShutdownReason, StateChanges, WindowBounds};
use crate::records::Batch;

/// A processor instance bound to one shard; made by
/// [`Processor::instantiate`](super::Processor::instantiate).
pub struct ShardInstance {
    store: Store<ShardState>,
    processor: Exports,
    limits: Limits,
    /// Set once a call trapped (wasmtime forbids entering the instance
    /// again), or the instance was retired.
    poisoned: bool,
}

/// A guest's error message, cut to [`guest_log::MAX_ERROR`] bytes.
fn cut_error(message: String) -> String {
    match guest_log::cut(&message, guest_log::MAX_ERROR) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

impl ShardInstance {
    pub(super) fn new(store: Store<ShardState>, processor: Exports, limits: Limits) -> Self {
        Self { store, processor, limits, poisoned: false }
    }

    /// The version this is an instance of ([`Processor::describe`](super::Processor::describe)).
    pub fn processor(&self) -> &str {
        &self.store.data().speaker.processor
    }

    /// Calls `initialize` with where delivery starts.
    pub async fn initialize(&mut self, shard: &ShardInfo) -> Result<(), CallError> {
        self.begin_call()?;
        let result = self.processor.initialize(&mut self.store, shard).await;
        let result = self.finish_call(result);
        self.flush_outputs(result).await
    }

    /// Calls `process-records`. The batch's columns are moved into the call
    /// (no copy on the host side) and back, so it can be delivered again
    /// after a retryable error.
    pub async fn process_records(&mut self, batch: &mut Batch) -> Result<(), CallError> {
        self.begin_call()?;
        self.store.data_mut().checkpoints.delivering(batch);
        let result = self.processor.process_records(&mut self.store, batch).await;
        let result = match self.finish_call(result) {
            Err(CallError::FailedAt { index, reason }) if index as usize >= batch.len() => Err(CallError::Fatal(format!(
                "it said the batch failed at record {index}, but the batch has {} records: {reason}",
                batch.len()
            ))),
            result => result,
        };
        let result = self.flush_outputs(result).await;
        self.store.data_mut().checkpoints.delivered(result.is_ok());
        result
    }

    /// Marks `records` processed (as if a call had returned ok for them) and
    /// checkpoints the last of them, after flushing the outputs: for the
    /// records before a partial failure, and for records the failure policy
    /// gave up on once their dead letters were written. Works on an instance
    /// that trapped: no guest code runs.
    pub async fn checkpoint_through(&mut self, records: &Batch) -> Result<(), CheckpointError> {
        let checkpoints = &mut self.store.data_mut().checkpoints;
        checkpoints.delivering(records);
        checkpoints.delivered(true);
        checkpoints.checkpoint_last().await
    }

    /// Calls `window.close` with the window and the keys changed in it,
    /// then writes what it sent and commits its state changes at the last
    /// checkpoint (the caller checkpointed every record of the window
    /// first). A failure drops both: the close is made again from the
    /// same state.
    pub async fn close_window(&mut self, window: WindowBounds, keys: &[String]) -> Result<(), CallError> {
        self.call_close_window(window, keys).await?;
        self.store.data_mut().checkpoints.commit_again().await.map_err(|e| {
            self.store.data_mut().checkpoints.state.discard();
            CallError::Uncommitted(e)
        })
    }

    /// Calls `window.close` with the window and the keys changed in it,
    /// then writes what it sent; what it changed stays pending, for the
    /// caller to commit (see [`Self::take_state_changes`]) or drop.
    pub async fn call_close_window(&mut self, window: WindowBounds, keys: &[String]) -> Result<(), CallError> {
        self.begin_call()?;
        self.store.data_mut().checkpoints.state.admit(keys);
        let result = self.processor.close_window(&mut self.store, window, keys).await;
        let result = self.finish_call(result);
        self.flush_outputs(result).await
    }

    /// Checkpoints the last record processed (the host's own checkpoint:
    /// before a window closes). Nothing new delivered: nothing written.
    pub async fn checkpoint(&mut self) -> Result<(), CheckpointError> {
        self.store.data_mut().checkpoints.checkpoint_last().await
    }

    /// The state changes made since the last checkpoint: what a write
    /// covering every record delivered must commit (`SHARD_END`).
    pub fn pending_state(&self) -> &StateChanges {
        self.store.data().checkpoints.state.pending()
    }

    /// Takes the state changes made since the last checkpoint, which the
    /// caller commits from now on (a lane of several on one shard, after
    /// each call), and forgets the values the instance cached.
    pub fn take_state_changes(&mut self) -> StateChanges {
        self.store.data_mut().checkpoints.state.take_changes()
    }

    /// Calls `shutdown`. After `lease-lost` every checkpoint is refused, even
    /// one made during this call.
    pub async fn shutdown(&mut self, reason: ShutdownReason) -> Result<(), CallError> {
        self.begin_call()?;
        if reason == ShutdownReason::LeaseLost {
            self.store.data_mut().checkpoints.lease_lost();
        }
        let result = self.processor.shutdown(&mut self.store, reason).await;
        let result = self.finish_call(result);
        self.flush_outputs(result).await
    }

    /// At the end of a call: writes what it sent when it succeeded, or
    /// failed part-way (the records before the failure are done); a target
    /// that keeps failing fails the call with [`CallError::OutputsUnwritten`]
    /// and its input comes again. Drops what a failed call sent and the
    /// state it changed since the last checkpoint (both are made again with
    /// that input).
    async fn flush_outputs(&mut self, result: Result<(), CallError>) -> Result<(), CallError> {
        let checkpoints = &mut self.store.data_mut().checkpoints;
        let flushed = if result.as_ref().is_err_and(|e| !matches!(e, CallError::FailedAt { .. })) {
            result
        } else {
            match checkpoints.outputs.flush().await {
                Ok(()) => result,
                Err(e) => Err(CallError::OutputsUnwritten(e)),
            }
        };
        if flushed.as_ref().is_err_and(|e| !matches!(e, CallError::FailedAt { .. })) {
            checkpoints.outputs.discard();
            checkpoints.state.discard();
        }
        flushed
    }

    /// Stops any call of this instance, within one epoch tick, once
    /// `withdrawn` returns true (the caller can no longer use its result);
    /// the call fails with [`CallError::Withdrawn`] and the instance is spent.
    pub fn withdraw_when(&mut self, withdrawn: Arc<dyn Fn() -> bool + Send + Sync>) {
        self.store.data_mut().withdrawn = Some(withdrawn);
    }

    /// Ends the instance for good: no call enters it again, and the memory
    /// it counted against a [`SharedMemory`](super::SharedMemory) is given
    /// back now rather than when it is dropped, so a successor can start
    /// beside it.
    pub fn retire(&mut self) {
        self.poisoned = true;
        self.store.data_mut().release_shared_memory();
    }

    /// Refuses every checkpoint from now on: the caller no longer holds the lease.
    pub fn revoke_checkpoints(&mut self) {
        self.store.data_mut().checkpoints.lease_lost();
    }

    fn begin_call(&mut self) -> Result<(), CallError> {
        if self.poisoned {
            return Err(CallError::Trap("the instance trapped earlier and cannot be called again".into()));
        }
        self.limits.begin_call(&mut self.store);
        Ok(())
    }

    fn finish_call(&mut self, result: wasmtime::Result<Result<(), ProcessorError>>) -> Result<(), CallError> {
        match result {
            Ok(Ok(())) => Ok(()),
            // Cut where they enter: an error is logged, reported in the
            // heartbeat row and put in dead letters.
            Ok(Err(ProcessorError::Retryable(message))) => Err(CallError::Retryable(cut_error(message))),
            Ok(Err(ProcessorError::Fatal(message))) => Err(CallError::Fatal(cut_error(message))),
            Ok(Err(ProcessorError::FailedAt(failure))) => Err(CallError::FailedAt { index: failure.index, reason: cut_error(failure.reason) }),
            Err(error) => {
                self.poisoned = true;
                Err(self.limits.classify(error, &self.store))
            }
        }
    }
}
