//! Counts records per shard, logs each one, and checkpoints every
//! [`CHECKPOINT_EVERY`] records, and once more when the worker stops
//! (`shutdown(requested)`). It never checkpoints at a shard's end: there
//! kcl-host records `SHARD_END` on its own.
//!
//! Each record is logged as `record <sequence-number> <partition-key> <data>`
//! so tests and the demo can see exactly what was delivered, in order.

use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo, ShutdownReason};

/// How many records between checkpoints.
pub const CHECKPOINT_EVERY: u64 = 100;

pub struct Counter {
    shard_id: String,
    seen: u64,
    since_checkpoint: u64,
}

impl RecordProcessor for Counter {
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
        kcl_guest::info!("initialize {} from {}", shard.shard_id, shard.starting_checkpoint);
        Ok(Counter { shard_id: shard.shard_id, seen: 0, since_checkpoint: 0 })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        for record in &batch {
            kcl_guest::info!(
                "record {} {} {}",
                record.sequence_number,
                record.partition_key,
                String::from_utf8_lossy(record.data)
            );
            self.seen += 1;
            self.since_checkpoint += 1;
            if self.since_checkpoint >= CHECKPOINT_EVERY {
                checkpointer
                    .checkpoint_at(&record)
                    .map_err(|e| ProcessorError::retryable(e.to_string()))?;
                self.since_checkpoint = 0;
            }
        }
        Ok(())
    }

    fn shutdown(&mut self, reason: ShutdownReason, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        kcl_guest::info!("shutdown {} after {} records: {reason:?}", self.shard_id, self.seen);
        if reason == ShutdownReason::Requested {
            checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))?;
        }
        Ok(())
    }
}

kcl_guest::export_processor!(Counter);
