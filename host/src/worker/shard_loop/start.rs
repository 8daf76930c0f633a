//! Where one attempt at a shard starts reading.

use crate::fetch::StartingPosition;
use crate::lease::Checkpoint;
use crate::records::Position;

/// Where an attempt starts reading.
#[derive(Debug, PartialEq)]
pub(super) enum Start {
    /// From here; with the checkpoint earlier ones may not go before.
    Read(StartingPosition, Option<Position>),
    /// The lease is at `SHARD_END` already.
    Finished,
    /// AT_TIMESTAMP without a timestamp.
    Refused,
}

/// Where an attempt starts: after the checkpoint; for a lease with none, at
/// its initial position — or, when an earlier attempt already delivered
/// from there, at that attempt's first record (LATEST or a timestamp read
/// again later would skip what it was given).
pub(super) fn starting_position(checkpoint: &Checkpoint, first_delivered: Option<&str>, initial_timestamp_ms: Option<i64>) -> Start {
    let restart = first_delivered.map(|seq| StartingPosition::At(seq.to_owned()));
    match checkpoint {
        Checkpoint::TrimHorizon => Start::Read(StartingPosition::TrimHorizon, None),
        Checkpoint::Latest => Start::Read(restart.unwrap_or(StartingPosition::Latest), None),
        Checkpoint::AtTimestamp => match initial_timestamp_ms {
            Some(ms) => Start::Read(restart.unwrap_or(StartingPosition::AtTimestamp(ms)), None),
            None => Start::Refused,
        },
        Checkpoint::At(position) => Start::Read(StartingPosition::Checkpoint(position.clone()), Some(position.clone())),
        Checkpoint::ShardEnd => Start::Finished,
    }
}
