//! A processor built against the frozen `kcl:processor@0.2.0` WIT (columnar
//! batches, no `output`), straight on wit-bindgen, as processors built
//! before 0.3 are. It logs each record as `record <sequence-number> <data>`,
//! checkpoints at the first record of each batch by index and then at the
//! last, and logs the shutdown reason.

wit_bindgen::generate!({ path: "../../../wit/v0.2", world: "processor" });

use exports::kcl::processor::record_processor::Guest;
use kcl::processor::types::{Batch, ProcessorError, ShardInfo, ShutdownReason};
use kcl::processor::{checkpointer, log};

struct LegacyV02;

/// `column[ends[i-1]..ends[i]]`.
fn cut<'a>(column: &'a [u8], ends: &[u32], i: usize) -> &'a [u8] {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &column[start..ends[i] as usize]
}

impl Guest for LegacyV02 {
    fn initialize(_: ShardInfo) -> Result<(), ProcessorError> {
        Ok(())
    }

    fn process_records(batch: Batch) -> Result<(), ProcessorError> {
        for i in 0..batch.data_ends.len() {
            let sequence_number = String::from_utf8_lossy(cut(batch.sequence_numbers.as_bytes(), &batch.sequence_number_ends, i));
            let data = String::from_utf8_lossy(cut(&batch.data, &batch.data_ends, i));
            log::log(log::Level::Info, &format!("record {sequence_number} {data}"));
        }
        let failed = |e| ProcessorError::Retryable(format!("{e:?}"));
        checkpointer::checkpoint_at_index(0).map_err(failed)?;
        checkpointer::checkpoint().map_err(failed)
    }

    fn shutdown(reason: ShutdownReason) -> Result<(), ProcessorError> {
        log::log(log::Level::Info, &format!("shutdown {reason:?}"));
        Ok(())
    }
}

export!(LegacyV02);
