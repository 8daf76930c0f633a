//! The 0.3 contract (0.4 without `state`), still loaded. It shares 0.4's
//! `types` (see `bindings`), so its calls need no conversion; its imports
//! are answered by the current ones.

use super::bindings::v0_3::kcl::processor as old;
use super::bindings::v0_4::kcl::processor as current;
use super::output::{OutputRecords, SendError};
use super::store::ShardState;
use super::legacy::current_level;
use super::CheckpointError;

impl old::checkpointer::Host for ShardState {
    async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), CheckpointError>> {
        current::checkpointer::Host::checkpoint(self).await
    }

    async fn checkpoint_at_index(&mut self, index: u32) -> wasmtime::Result<Result<(), CheckpointError>> {
        current::checkpointer::Host::checkpoint_at_index(self, index).await
    }

    async fn checkpoint_at(&mut self, sequence_number: String, sub: Option<u64>) -> wasmtime::Result<Result<(), CheckpointError>> {
        current::checkpointer::Host::checkpoint_at(self, sequence_number, sub).await
    }
}

impl old::log::Host for ShardState {
    async fn log(&mut self, level: old::log::Level, message: String) -> wasmtime::Result<()> {
        current::log::Host::log(self, current_level!(level, old::log::Level), message).await
    }
}

impl old::output::Host for ShardState {
    async fn send(&mut self, target: String, records: old::output::Records) -> wasmtime::Result<Result<(), old::output::SendError>> {
        let records = OutputRecords {
            data: records.data,
            data_ends: records.data_ends,
            partition_keys: records.partition_keys,
            partition_key_ends: records.partition_key_ends,
            explicit_hash_keys: records.explicit_hash_keys,
            explicit_hash_key_ends: records.explicit_hash_key_ends,
        };
        let sent = current::output::Host::send(self, target, records).await?;
        Ok(sent.map_err(|e| match e {
            SendError::UnknownTarget(m) => old::output::SendError::UnknownTarget(m),
            SendError::Invalid(m) => old::output::SendError::Invalid(m),
        }))
    }
}
