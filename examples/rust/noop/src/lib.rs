//! A processor that accepts every batch and does nothing: the floor for
//! host→guest throughput, and the smallest possible processor.

use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo};

pub struct Noop;

impl RecordProcessor for Noop {
    fn initialize(_: ShardInfo) -> Result<Self, ProcessorError> {
        Ok(Noop)
    }

    fn process_records(&mut self, _: Batch, _: &Checkpointer) -> Result<(), ProcessorError> {
        Ok(())
    }
}

kcl_guest::export_processor!(Noop);
