//! Write [kcl-host](https://github.com/kcl-host) record processors in Rust.
//!
//! A processor serves one Kinesis shard at a time. kcl-host owns the shard's
//! lifecycle — leases, fetching, retries, and the `SHARD_END` checkpoint once
//! a closed shard is done — so a processor only handles records and says how
//! far it got.
//!
//! Implement [`RecordProcessor`], export it with [`export_processor!`], and
//! build for `wasm32-wasip2` as a `cdylib`:
//!
//! ```no_run
//! use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo, ShutdownReason};
//!
//! /// Counts records and checkpoints after every batch.
//! struct Counter {
//!     shard: String,
//!     seen: u64,
//! }
//!
//! impl RecordProcessor for Counter {
//!     fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
//!         kcl_guest::info!("starting {} at {}", shard.shard_id, shard.starting_checkpoint);
//!         Ok(Counter { shard: shard.shard_id, seen: 0 })
//!     }
//!
//!     fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
//!         self.seen += batch.len() as u64;
//!         // A refused checkpoint is worth retrying later, not worth failing the shard.
//!         checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))
//!     }
//!
//!     fn shutdown(&mut self, reason: ShutdownReason, _: &Checkpointer) -> Result<(), ProcessorError> {
//!         kcl_guest::info!("{}: {} records, stopping ({reason:?})", self.shard, self.seen);
//!         Ok(())
//!     }
//! }
//!
//! kcl_guest::export_processor!(Counter);
//! ```
//!
//! ```toml
//! # Cargo.toml
//! [lib]
//! crate-type = ["cdylib"]
//! ```
//!
//! `cargo build --target wasm32-wasip2 --release` then gives a component that
//! `kcl-host replay` and `kcl-host run` accept.

#![warn(missing_docs)]

mod adapter;
#[cfg(feature = "json")]
pub mod change;
mod checkpointer;
pub mod config;
pub mod log;
pub mod output;
pub mod state;
mod types;

#[cfg(feature = "json")]
pub use change::{Change, ChangeError, EventName};
pub use checkpointer::{CheckpointError, Checkpointer};
pub use types::{Batch, ProcessorError, Record, Records, ShardInfo, ShutdownReason, Window};

/// Generated bindings for the `kcl:processor` world. Not a stable API: use
/// the types at the crate root.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        // The guest world with the `window` export (`kcl-host run --window`).
        world: "windowed-guest",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "__export_processor_world",
        default_bindings_module: "kcl_guest::bindings",
    });
}

#[doc(hidden)]
pub use adapter::Adapter;

/// A shard's record processor. One value of it serves one shard, from
/// [`initialize`](RecordProcessor::initialize) to
/// [`shutdown`](RecordProcessor::shutdown).
pub trait RecordProcessor: Sized + 'static {
    /// Creates the processor for a shard, before any records.
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError>;

    /// Handles one batch of records, in shard order. Checkpoint with
    /// `checkpointer` when the records are safely processed; after a crash
    /// delivery resumes after the last checkpoint.
    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError>;

    /// Called once at the end. On [`ShutdownReason::ShardEnd`] the host
    /// records `SHARD_END` itself after this returns `Ok`; there is no need
    /// to checkpoint here. On [`ShutdownReason::Requested`] this is the last
    /// chance to checkpoint. The default does nothing.
    fn shutdown(&mut self, reason: ShutdownReason, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let _ = (reason, checkpointer);
        Ok(())
    }

    /// With `kcl-host run --window`: `window` closed for this shard.
    /// `keys` are the [`state`] keys changed while processing its records
    /// (each once): read them, send results to an [`output`], and delete
    /// what the next window should not see. The host writes the outputs and
    /// commits the state changes once this returns `Ok`; an error (or a
    /// crash) makes the close again, from the same state. Do not checkpoint
    /// here: the host does. The default refuses, naming this method.
    fn close_window(&mut self, window: Window, keys: Vec<String>) -> Result<(), ProcessorError> {
        let _ = keys;
        Err(ProcessorError::fatal(format!(
            "window [{}, {}) closed, but this processor does not implement RecordProcessor::close_window",
            window.start_ms, window.end_ms
        )))
    }
}

/// Exports a [`RecordProcessor`] implementation as the component's
/// `record-processor`. Use it once per crate.
#[macro_export]
macro_rules! export_processor {
    ($processor:ty) => {
        type __KclGuestExport = $crate::Adapter<$processor>;
        $crate::bindings::__export_processor_world!(__KclGuestExport with_types_in $crate::bindings);
    };
}
