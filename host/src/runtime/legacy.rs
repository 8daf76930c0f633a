//! What the older contracts share at their boundary: the same types under
//! another package version, converted to and from the current ones. Each
//! older contract's module (`v0_1`, `v0_2`) expands [`legacy_boundary!`]
//! for its bindings, then adds what is its own.

/// Conversions between the current types and those of an older contract
/// version `$v` (its `kcl::processor` bindings module), and the `types`,
/// `log` and (for the calls all versions have) `checkpointer` host imports.
macro_rules! legacy_boundary {
    ($v:path) => {
        use $v as old;
        use $crate::runtime::{CheckpointError, ProcessorError, ShardInfo, ShutdownReason};

        fn checkpoint_result(result: Result<(), CheckpointError>) -> Result<(), old::types::CheckpointError> {
            use old::types::CheckpointError as Old;
            result.map_err(|e| match e {
                CheckpointError::LeaseLost => Old::LeaseLost,
                CheckpointError::InvalidSequenceNumber(m) => Old::InvalidSequenceNumber(m),
                CheckpointError::Unavailable(m) => Old::Unavailable(m),
            })
        }

        impl old::types::Host for ShardState {}

        impl old::log::Host for ShardState {
            async fn log(&mut self, level: old::log::Level, message: String) -> wasmtime::Result<()> {
                let level = $crate::runtime::legacy::current_level!(level, old::log::Level);
                $crate::runtime::bindings::v0_4::kcl::processor::log::Host::log(self, level, message).await
            }
        }

        /// A call's result in the current types.
        pub(super) fn result(result: Result<(), old::types::ProcessorError>) -> Result<(), ProcessorError> {
            use old::types::ProcessorError as Old;
            result.map_err(|e| match e {
                Old::Retryable(m) => ProcessorError::Retryable(m),
                Old::Fatal(m) => ProcessorError::Fatal(m),
            })
        }

        /// The shard as this version's `initialize` takes it.
        pub(super) fn shard_info(shard: &ShardInfo) -> old::types::ShardInfo {
            old::types::ShardInfo {
                stream_name: shard.stream_name.clone(),
                shard_id: shard.shard_id.clone(),
                starting_checkpoint: shard.starting_checkpoint.clone(),
                starting_sub_sequence_number: shard.starting_sub_sequence_number,
            }
        }

        /// The reason as this version's `shutdown` takes it.
        pub(super) fn shutdown_reason(reason: ShutdownReason) -> old::types::ShutdownReason {
            use old::types::ShutdownReason as Old;
            match reason {
                ShutdownReason::ShardEnd => Old::ShardEnd,
                ShutdownReason::LeaseLost => Old::LeaseLost,
                ShutdownReason::Requested => Old::Requested,
            }
        }
    };
}

/// An older contract's log level (`$old`, the same five cases) as the current [`LogLevel`](crate::runtime::LogLevel).
macro_rules! current_level {
    ($level:expr, $($old:ident)::+) => {
        match $level {
            $($old)::+::Trace => $crate::runtime::LogLevel::Trace,
            $($old)::+::Debug => $crate::runtime::LogLevel::Debug,
            $($old)::+::Info => $crate::runtime::LogLevel::Info,
            $($old)::+::Warn => $crate::runtime::LogLevel::Warn,
            $($old)::+::Error => $crate::runtime::LogLevel::Error,
        }
    };
}

pub(super) use {current_level, legacy_boundary};
