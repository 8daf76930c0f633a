//! The 0.2 contract (columnar batches, no `output`), still loaded: its
//! imports answered by the current ones, its calls' arguments and results
//! converted at the boundary.

use super::legacy::legacy_boundary;
use super::store::ShardState;

legacy_boundary!(super::bindings::v0_2::kcl::processor);

impl old::checkpointer::Host for ShardState {
    async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), old::types::CheckpointError>> {
        self.check_withdrawn()?;
        Ok(checkpoint_result(self.checkpoints.checkpoint_last().await))
    }

    async fn checkpoint_at_index(&mut self, index: u32) -> wasmtime::Result<Result<(), old::types::CheckpointError>> {
        self.check_withdrawn()?;
        Ok(checkpoint_result(self.checkpoints.checkpoint_at_index(index).await))
    }

    async fn checkpoint_at(&mut self, sequence_number: String, sub: Option<u64>) -> wasmtime::Result<Result<(), old::types::CheckpointError>> {
        self.check_withdrawn()?;
        Ok(checkpoint_result(self.checkpoints.checkpoint_at_sequence(&sequence_number, sub).await))
    }
}
