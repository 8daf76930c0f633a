//! How a shard's instances end: `SHARD_END` once the shard is done, or a
//! shutdown when the worker stops or the lease is lost.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Interrupt, Outcome, ShardLoop};
use crate::lease::coordinator::CheckpointFailure;
use crate::lease::{Checkpoint, LeaseStore};
use crate::state::fits_one_transaction;
use crate::runtime::{CheckpointError, ShardInstance, ShutdownReason, StateChanges};

impl<S: LeaseStore> ShardLoop<S> {
    /// The shard is fully read and done: `shutdown(shard-end)` on each of
    /// its instances, then `SHARD_END`, committing in the same write every
    /// state change not yet checkpointed (`SHARD_END` says every record's
    /// changes are in). Changes too many for one transaction are committed
    /// first through the state log at the last record, so that a
    /// `SHARD_END` row never names a log left to apply: nobody takes that
    /// lease again to apply it, and its children read the state at once.
    pub(super) async fn end_shard(&self, instances: &mut [ShardInstance], children: BTreeSet<String>) -> Interrupt {
        let mut pending = StateChanges::new();
        for instance in instances.iter_mut() {
            if let Err(e) = instance.shutdown(ShutdownReason::ShardEnd).await {
                return Interrupt::Failed(format!("shutdown(shard-end) failed, so SHARD_END was not written: {e}"));
            }
            if !fits_one_transaction(instance.pending_state())
                && let Err(e) = instance.checkpoint().await
            {
                if matches!(e, CheckpointError::LeaseLost) {
                    return Interrupt::Done(Outcome::LeaseLost);
                }
                return Interrupt::Failed(format!("committing the state left at the shard's end failed, so SHARD_END was not written: {e}"));
            }
            pending.extend(instance.pending_state().iter().map(|(key, value)| (key.clone(), value.clone())));
        }
        if !pending.is_empty() {
            tracing::info!(shard = %self.held.key(), changes = pending.len(), "committing the state changes made since the last checkpoint with SHARD_END");
        }
        match self.committer().write(Checkpoint::ShardEnd, &children, &pending).await {
            Ok(()) => {
                tracing::info!(shard = %self.held.key(), processor = self.processor.borrow().describe(), ?children, "shard processed to its end; SHARD_END written");
                Interrupt::Done(Outcome::ShardEnd { children })
            }
            Err(CheckpointFailure::LeaseLost) => Interrupt::Done(Outcome::LeaseLost),
            Err(e) => Interrupt::Failed(format!("writing SHARD_END failed: {e}")),
        }
    }

    /// Shuts `instance` down for `outcome`: a stop, or a lost lease.
    pub(super) async fn finish_outcome(&self, instance: &mut ShardInstance, outcome: Outcome) -> Interrupt {
        let reason = if outcome == Outcome::Stopped { ShutdownReason::Requested } else { ShutdownReason::LeaseLost };
        self.finish(instance, reason).await
    }

    /// `shutdown(lease-lost)` or `shutdown(requested)`; an error there is
    /// only logged, since the lease is going away either way. After a lost
    /// lease the call runs (its checkpoints refused, within the call
    /// deadline) although the lease is no longer valid: it delivers no
    /// record, and the processor hears why it stops.
    pub(super) async fn finish(&self, instance: &mut ShardInstance, reason: ShutdownReason) -> Interrupt {
        if reason == ShutdownReason::LeaseLost {
            instance.revoke_checkpoints();
            instance.withdraw_when(Arc::new(|| false));
        }
        if let Err(e) = instance.shutdown(reason).await {
            tracing::warn!(shard = %self.held.key(), processor = self.processor.borrow().describe(), "shutdown({reason:?}) failed: {e}");
        }
        Interrupt::Done(if reason == ShutdownReason::Requested { Outcome::Stopped } else { Outcome::LeaseLost })
    }
}
