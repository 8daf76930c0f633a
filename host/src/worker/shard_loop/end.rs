//! How a shard's instances end: `SHARD_END` once the shard is done, or a
//! shutdown when the worker stops or the lease is lost.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Interrupt, Outcome, ShardLoop};
use crate::lease::coordinator::CheckpointFailure;
use crate::lease::{Checkpoint, LeaseStore};
use crate::runtime::{ShardInstance, ShutdownReason};

impl<S: LeaseStore> ShardLoop<S> {
    /// The shard is fully read and done: `shutdown(shard-end)` on each of
    /// its instances, then `SHARD_END`.
    pub(super) async fn end_shard(&self, instances: &mut [ShardInstance], children: BTreeSet<String>) -> Interrupt {
        for instance in instances {
            if let Err(e) = instance.shutdown(ShutdownReason::ShardEnd).await {
                return Interrupt::Failed(format!("shutdown(shard-end) failed, so SHARD_END was not written: {e}"));
            }
        }
        match self.held.checkpoint(Checkpoint::ShardEnd, &children).await {
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
