//! The host side of the current contract's imports: `checkpointer`, `log`,
//! `output` and `state`. Each call first checks that the running call was
//! not withdrawn.

use super::bindings::v0_4::kcl::processor as current;
use super::guest_log;
use super::store::ShardState;
use super::output::{OutputRecords, SendError};
use super::state::StateError;
use super::{CheckpointError, LogLevel};

impl current::types::Host for ShardState {}

impl current::checkpointer::Host for ShardState {
    async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.checkpoint_last().await)
    }

    async fn checkpoint_at_index(&mut self, index: u32) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.checkpoint_at_index(index).await)
    }

    async fn checkpoint_at(&mut self, sequence_number: String, sub_sequence_number: Option<u64>) -> wasmtime::Result<Result<(), CheckpointError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.checkpoint_at_sequence(&sequence_number, sub_sequence_number).await)
    }
}

impl current::log::Host for ShardState {
    async fn log(&mut self, level: LogLevel, message: String) -> wasmtime::Result<()> {
        self.check_withdrawn()?;
        guest_log::emit(&self.speaker, level, &message);
        Ok(())
    }
}

impl current::output::Host for ShardState {
    async fn send(&mut self, target: String, records: OutputRecords) -> wasmtime::Result<Result<(), SendError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.outputs.send(target, records).await)
    }
}

impl current::state::Host for ShardState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<Vec<u8>>, StateError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.state.get_many(std::slice::from_ref(&key)).await.map(|mut values| values.remove(0)))
    }

    async fn get_many(&mut self, keys: Vec<String>) -> wasmtime::Result<Result<Vec<Option<Vec<u8>>>, StateError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.state.get_many(&keys).await)
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), StateError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.state.change(key, Some(value)))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<(), StateError>> {
        self.check_withdrawn()?;
        Ok(self.checkpoints.state.change(key, None))
    }
}
