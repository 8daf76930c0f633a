//! Replacing a shard's instance without reading the shard again: a swap
//! to another version, and a restart after a failure, each handed the
//! records since the last checkpoint from memory.

use std::sync::{Arc, Mutex as StdMutex};

use tokio::sync::watch;

use super::{Interrupt, ShardLoop};
use crate::failure::FailurePolicy;
use crate::lease::LeaseStore;
use crate::records::{Batch, Position};
use crate::runtime::{Processor, ShardInstance, ShutdownReason};
use crate::worker::redelivery::Unacknowledged;

impl<S: LeaseStore> ShardLoop<S> {
    /// Replaces the instance with one of `processor` between two batches:
    /// `shutdown(requested)` on the old one (it may checkpoint), a new one
    /// initialized from the lease's checkpoint, and the records delivered
    /// since that checkpoint delivered again from memory. The lease and the
    /// reader stay as they are.
    pub(super) async fn swap(
        &self,
        mut old: ShardInstance,
        processor: &Processor,
        policy: &mut FailurePolicy,
        checkpointed: &Arc<StdMutex<Option<Position>>>,
        unacknowledged: &mut Unacknowledged,
    ) -> Result<ShardInstance, Interrupt> {
        let shard = self.held.key().to_owned();
        if let Err(e) = old.shutdown(ShutdownReason::Requested).await {
            tracing::warn!(shard = %shard, processor = old.processor(), "shutdown(requested) before the swap failed: {e}");
        }
        drop(old);
        let last_checkpoint = checkpointed.lock().expect("not poisoned").clone();
        let again = unacknowledged.since(last_checkpoint.as_ref()).ok_or_else(|| {
            Interrupt::Failed(
                "swapping the processor: the records since the last checkpoint did not fit --swap-buffer-mib, so the shard restarts from it".into(),
            )
        })?;
        let records: usize = again.iter().map(Batch::len).sum();
        let instance = self.reopen_with(processor, again, last_checkpoint, policy, checkpointed).await?;
        self.metrics.swapped();
        tracing::info!(shard = %shard, processor = processor.describe(), "swapped the processor; {records} records since the last checkpoint delivered again");
        Ok(instance)
    }

    /// The instance failed (`why`): after the policy's wait, a fresh one from
    /// the last checkpoint — of the version offered now, which may be a
    /// rollback (`running` becomes it) — gets the records since it again from
    /// memory, and the reader goes on where it was: nothing is read again.
    /// Err with `Failed` when those records did not fit the re-delivery
    /// budget (the caller restarts from the checkpoint, reading again), or
    /// with the outcome that interrupted the wait.
    pub(super) async fn restart_in_place(
        &self,
        mut why: String,
        (running, offered): (&mut Processor, &mut watch::Receiver<Processor>),
        policy: &mut FailurePolicy,
        checkpointed: &Arc<StdMutex<Option<Position>>>,
        unacknowledged: &mut Unacknowledged,
    ) -> Result<ShardInstance, Interrupt> {
        loop {
            let last_checkpoint = checkpointed.lock().expect("not poisoned").clone();
            let Some(again) = unacknowledged.since(last_checkpoint.as_ref()) else { return Err(Interrupt::Failed(why)) };
            let wait = policy.restart_wait();
            self.metrics.restarted();
            tracing::warn!(shard = %self.held.key(), processor = running.describe(), "{why}; restarting from the last checkpoint in {wait:?}");
            if let Some(outcome) = self.wait(wait).await {
                return Err(Interrupt::Done(outcome));
            }
            *running = offered.borrow_and_update().clone();
            let processor = &*running;
            policy.instance_started();
            match self.reopen_with(processor, again, last_checkpoint, policy, checkpointed).await {
                Err(Interrupt::Failed(error)) => why = error,
                reopened => return reopened,
            }
        }
    }

    /// A fresh instance of `processor` from the lease's checkpoint
    /// (`last_checkpoint`), handed `again`: the records since it, from memory.
    pub(super) async fn reopen_with(
        &self,
        processor: &Processor,
        again: Vec<Batch>,
        last_checkpoint: Option<Position>,
        policy: &mut FailurePolicy,
        checkpointed: &Arc<StdMutex<Option<Position>>>,
    ) -> Result<ShardInstance, Interrupt> {
        let lease = self.held.snapshot().await;
        let state = super::hooks::shard_state(self).await;
        let mut instance = self.open(processor, &lease.checkpoint, last_checkpoint, self.lease_sink(checkpointed), state).await?;
        for mut batch in again {
            if let Some(interrupt) = self.deliver(&mut instance, processor, policy, &mut batch).await {
                return Err(interrupt);
            }
        }
        Ok(instance)
    }
}
