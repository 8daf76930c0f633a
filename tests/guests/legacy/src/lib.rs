//! A processor built against the frozen `kcl:processor@0.1.0` WIT (a list
//! of records), straight on wit-bindgen, as processors built before 0.2 are.
//!
//! On a shard whose id contains `noop` it does nothing with a batch; on any
//! other it sums purchases with the JSON aggregate example's `Totals`, logs
//! each record as `record <sequence-number> <data>` (when the data is not
//! JSON) and checkpoints the batch: the old layout's side of the runtime
//! benchmark, and a 0.1 guest for the loading test.

use std::cell::RefCell;

use kcl_example_json_aggregate::Totals;

wit_bindgen::generate!({ path: "../../../wit/v0.1", world: "processor" });

use exports::kcl::processor::record_processor::Guest;
use kcl::processor::types::{Batch, ProcessorError, ShardInfo, ShutdownReason};
use kcl::processor::{checkpointer, log};

thread_local! {
    /// `None` on a no-op shard.
    static TOTALS: RefCell<Option<Totals>> = const { RefCell::new(None) };
}

struct Legacy;

impl Guest for Legacy {
    fn initialize(shard: ShardInfo) -> Result<(), ProcessorError> {
        TOTALS.set((!shard.shard_id.contains("noop")).then(Totals::default));
        Ok(())
    }

    fn process_records(batch: Batch) -> Result<(), ProcessorError> {
        TOTALS.with_borrow_mut(|totals| {
            let Some(totals) = totals else { return Ok(()) };
            for record in &batch.records {
                let rejected = totals.rejected;
                totals.add(&record.data);
                if totals.rejected > rejected {
                    let text = String::from_utf8_lossy(&record.data);
                    log::log(log::Level::Info, &format!("record {} {text}", record.sequence_number));
                }
            }
            checkpointer::checkpoint().map_err(|e| ProcessorError::Retryable(format!("{e:?}")))
        })
    }

    fn shutdown(_: ShutdownReason) -> Result<(), ProcessorError> {
        Ok(())
    }
}

export!(Legacy);
