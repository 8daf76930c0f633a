//! A processor built against the frozen `kcl:processor@0.3.0` WIT (outputs,
//! no state), straight on wit-bindgen, as processors built before 0.4 are.
//! It sends each record's data to the output `out` under its partition
//! key, logs `sent <n>` per batch, and checkpoints the batch.

wit_bindgen::generate!({ path: "../../../wit/v0.3", world: "processor" });

use exports::kcl::processor::record_processor::Guest;
use kcl::processor::output::{self, Records};
use kcl::processor::types::{Batch, ProcessorError, ShardInfo, ShutdownReason};
use kcl::processor::{checkpointer, log};

struct LegacyV03;

impl Guest for LegacyV03 {
    fn initialize(_: ShardInfo) -> Result<(), ProcessorError> {
        Ok(())
    }

    fn process_records(batch: Batch) -> Result<(), ProcessorError> {
        // The batch's data and key columns are the output's columns as they are.
        let records = Records {
            data: batch.data,
            data_ends: batch.data_ends.clone(),
            partition_keys: batch.partition_keys,
            partition_key_ends: batch.partition_key_ends,
            explicit_hash_keys: String::new(),
            explicit_hash_key_ends: vec![0; batch.data_ends.len()],
        };
        output::send("out", &records).map_err(|e| ProcessorError::Fatal(format!("{e:?}")))?;
        log::log(log::Level::Info, &format!("sent {}", batch.data_ends.len()));
        checkpointer::checkpoint().map_err(|e| ProcessorError::Retryable(format!("{e:?}")))
    }

    fn shutdown(_: ShutdownReason) -> Result<(), ProcessorError> {
        Ok(())
    }
}

export!(LegacyV03);
