//! {name}: a kcl-host record processor. It reads each record as JSON,
//! sends every event on to the output `events` (declare where it goes:
//! `--output events=kinesis:STREAM`, `=dynamodb:TABLE`, `=https://…`,
//! `=stdout`), and checkpoints after every batch. kcl-host writes the
//! outputs before the checkpoint, so a restart resumes after the last batch
//! whose events were all written.

use kcl_guest::output::Outputs;
use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo, ShutdownReason};

pub struct Processor {
    shard: String,
    records: u64,
    not_json: u64,
}

impl RecordProcessor for Processor {
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
        kcl_guest::info!("starting {} at {}", shard.shard_id, shard.starting_checkpoint);
        Ok(Processor { shard: shard.shard_id, records: 0, not_json: 0 })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let mut events = Outputs::new();
        for record in &batch {
            self.records += 1;
            match serde_json::from_slice::<serde_json::Value>(record.data) {
                Ok(event) => {
                    events.push(record.partition_key, event.to_string().as_bytes());
                }
                Err(e) => {
                    // One bad record must not stop the shard: count it and go on.
                    self.not_json += 1;
                    kcl_guest::warn!("record {} is not JSON: {e}", record.sequence_number);
                }
            }
        }
        // An output that is not declared, or that the target cannot take, is a
        // setup error: fail the shard and say so.
        events.send("events").map_err(|e| ProcessorError::fatal(e.to_string()))?;
        // A refused checkpoint is worth retrying, not worth failing the shard.
        checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))
    }

    fn shutdown(&mut self, reason: ShutdownReason, _: &Checkpointer) -> Result<(), ProcessorError> {
        // At ShardEnd kcl-host writes SHARD_END itself once this returns Ok.
        kcl_guest::info!("{}: {} records, {} not JSON; {reason:?}", self.shard, self.records, self.not_json);
        Ok(())
    }
}

kcl_guest::export_processor!(Processor);
