//! What the counter example does, tagged: each record is logged as
//! `record-v2 <sequence-number> <partition-key> <data>`, and it checkpoints
//! when the worker stops or swaps it (`shutdown(requested)`). A swap test
//! tells from the log which version processed each record.

use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo, ShutdownReason};

pub struct Tagged;

impl RecordProcessor for Tagged {
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
        kcl_guest::info!("initialize-v2 {} from {}", shard.shard_id, shard.starting_checkpoint);
        Ok(Tagged)
    }

    fn process_records(&mut self, batch: Batch, _: &Checkpointer) -> Result<(), ProcessorError> {
        for record in &batch {
            let data = String::from_utf8_lossy(record.data);
            kcl_guest::info!("record-v2 {} {} {data}", record.sequence_number, record.partition_key);
        }
        Ok(())
    }

    fn shutdown(&mut self, reason: ShutdownReason, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        if reason == ShutdownReason::Requested {
            checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))?;
        }
        Ok(())
    }
}

kcl_guest::export_processor!(Tagged);
