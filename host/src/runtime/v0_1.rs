//! The 0.1 contract (a batch as a list of records), still loaded: its
//! imports answered by the current ones, its calls' arguments and results
//! converted at the boundary.

use super::bindings::v0_1::kcl::processor as v1;
use super::store::ShardState;
use super::{CheckpointError, LogLevel, ProcessorError, ShardInfo, ShutdownReason};
use crate::records::Batch;

fn checkpoint_result(result: Result<(), CheckpointError>) -> Result<(), v1::types::CheckpointError> {
    use v1::types::CheckpointError as V1;
    result.map_err(|e| match e {
        CheckpointError::LeaseLost => V1::LeaseLost,
        CheckpointError::InvalidSequenceNumber(m) => V1::InvalidSequenceNumber(m),
        CheckpointError::Unavailable(m) => V1::Unavailable(m),
    })
}

impl v1::types::Host for ShardState {}

impl v1::checkpointer::Host for ShardState {
    async fn checkpoint(&mut self) -> wasmtime::Result<Result<(), v1::types::CheckpointError>> {
        self.check_withdrawn()?;
        Ok(checkpoint_result(self.checkpoints.checkpoint_last().await))
    }

    async fn checkpoint_at(&mut self, sequence_number: String, sub: Option<u64>) -> wasmtime::Result<Result<(), v1::types::CheckpointError>> {
        self.check_withdrawn()?;
        Ok(checkpoint_result(self.checkpoints.checkpoint_at_sequence(&sequence_number, sub).await))
    }
}

impl v1::log::Host for ShardState {
    async fn log(&mut self, level: v1::log::Level, message: String) -> wasmtime::Result<()> {
        use v1::log::Level;
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        super::bindings::v0_2::kcl::processor::log::Host::log(self, level, message).await
    }
}

/// A 0.1 call's result in the current types.
pub(super) fn result(result: Result<(), v1::types::ProcessorError>) -> Result<(), ProcessorError> {
    use v1::types::ProcessorError as V1;
    result.map_err(|e| match e {
        V1::Retryable(m) => ProcessorError::Retryable(m),
        V1::Fatal(m) => ProcessorError::Fatal(m),
    })
}

/// The shard as 0.1's `initialize` takes it.
pub(super) fn shard_info(shard: &ShardInfo) -> v1::types::ShardInfo {
    v1::types::ShardInfo {
        stream_name: shard.stream_name.clone(),
        shard_id: shard.shard_id.clone(),
        starting_checkpoint: shard.starting_checkpoint.clone(),
        starting_sub_sequence_number: shard.starting_sub_sequence_number,
    }
}

/// The reason as 0.1's `shutdown` takes it.
pub(super) fn shutdown_reason(reason: ShutdownReason) -> v1::types::ShutdownReason {
    use v1::types::ShutdownReason as V1;
    match reason {
        ShutdownReason::ShardEnd => V1::ShardEnd,
        ShutdownReason::LeaseLost => V1::LeaseLost,
        ShutdownReason::Requested => V1::Requested,
    }
}

/// The batch as a 0.1 component takes it: a list of records.
pub(super) fn batch(batch: &Batch) -> v1::types::Batch {
    let records = batch
        .iter()
        .map(|r| v1::types::KinesisRecord {
            data: r.data.to_vec(),
            partition_key: r.partition_key.to_owned(),
            sequence_number: r.sequence_number.to_owned(),
            sub_sequence_number: r.sub_sequence_number,
            approximate_arrival_timestamp_ms: r.arrival_timestamp_ms,
            explicit_hash_key: r.explicit_hash_key.map(str::to_owned),
        })
        .collect();
    v1::types::Batch { records, millis_behind_latest: batch.millis_behind_latest }
}
