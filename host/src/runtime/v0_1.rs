//! The 0.1 contract (a batch as a list of records), still loaded: its
//! imports answered by the current ones, its calls' arguments and results
//! converted at the boundary.

use super::legacy::legacy_boundary;
use super::store::ShardState;
use crate::records::Batch;

legacy_boundary!(super::bindings::v0_1::kcl::processor);

impl old::checkpointer::Host for ShardState {
    async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), old::types::CheckpointError>> {
        self.check_withdrawn()?;
        Ok(checkpoint_result(self.checkpoints.checkpoint_last().await))
    }

    async fn checkpoint_at(&mut self, sequence_number: String, sub: Option<u64>) -> wasmtime::Result<Result<(), old::types::CheckpointError>> {
        self.check_withdrawn()?;
        Ok(checkpoint_result(self.checkpoints.checkpoint_at_sequence(&sequence_number, sub).await))
    }
}

/// The batch as a 0.1 component takes it: a list of records.
pub(super) fn batch(batch: &Batch) -> old::types::Batch {
    let records = batch
        .iter()
        .map(|r| old::types::KinesisRecord {
            data: r.data.to_vec(),
            partition_key: r.partition_key.to_owned(),
            sequence_number: r.sequence_number.to_owned(),
            sub_sequence_number: r.sub_sequence_number,
            approximate_arrival_timestamp_ms: r.arrival_timestamp_ms,
            explicit_hash_key: r.explicit_hash_key.map(str::to_owned),
        })
        .collect();
    old::types::Batch { records, millis_behind_latest: batch.millis_behind_latest }
}
