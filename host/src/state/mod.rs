//! Processor state in DynamoDB, committed with the checkpoint.
//!
//! A processor's `state` changes stay in its instance until it checkpoints;
//! then the lease-row update that records the checkpoint (conditional on
//! the lease's owner and counter) and the changed state items go in one
//! `TransactWriteItems`, so a checkpoint and the state it covers are
//! written together or not at all. After a crash the next owner reads the
//! state as of the last checkpoint and re-processes the records after it:
//! each record's effect lands exactly once.
//!
//! The state lives in the application's state table `<application>-KclHostState`
//! (created on first use, on demand), one item per stream and key:
//!
//! | attribute    | holds                                                  |
//! |--------------|--------------------------------------------------------|
//! | `stateKey`   | `<stream>/<key>` (the hash key)                        |
//! | `stream`     | the stream name                                        |
//! | `key`        | the processor's key                                    |
//! | `value`      | the value (binary)                                     |
//! | `shard`      | the shard whose checkpoint wrote it                    |
//! | `checkpoint` | that checkpoint's sequence number                      |
//!
//! With `--window`, the open window's index (the keys its records changed)
//! is kept in host items of the same table: see [`WindowIndex`].
//!
//! A key belongs to the shard whose hash-key range holds its MD5 hash (the
//! runtime refuses others), so one instance at a time writes a key: a
//! shard's children start only after it reached `SHARD_END`.

pub mod command;
mod commit;
mod log;
mod table;
mod window;

pub use commit::StateCommit;
pub use log::{fits_one_transaction, StateRecovery};
pub use table::{state_table_name, ShardStateSource, StateItem, StateTable};
pub use window::WindowIndex;
