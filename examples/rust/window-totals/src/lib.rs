//! Per-user purchase totals per window, exactly once: run it with
//! `kcl-host run --window 60s --output totals=dynamodb:TABLE` and each
//! minute's totals are written to the table as the minute closes, one item
//! per user and minute.
//!
//! Records are JSON like `{"user": "u1", "cents": 1250}`, put with the user
//! as partition key. Each record adds its cents to the user's state; when
//! the window closes, the host hands over the users whose state changed in
//! it: their totals are sent to the `totals` target and their state is
//! deleted for the next window. The host commits the state with each
//! checkpoint and the close like one, so after any crash every (user,
//! window) total is exact — a close made again writes the same item again.
//!
//! The table needs the key attributes `user` (string) and `window_start_ms`
//! (number).

use std::collections::{BTreeMap, BTreeSet};

use kcl_guest::output::Outputs;
use kcl_guest::state;
use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo, Window};
use serde::Deserialize;

/// One purchase as producers write it.
#[derive(Deserialize)]
struct Purchase {
    cents: i64,
}

struct WindowTotals;

impl RecordProcessor for WindowTotals {
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
        kcl_guest::info!("initialize {} at {}", shard.shard_id, shard.starting_checkpoint);
        Ok(WindowTotals)
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let mut added: BTreeMap<&str, i64> = BTreeMap::new();
        for record in &batch {
            match serde_json::from_slice::<Purchase>(record.data) {
                Ok(purchase) => *added.entry(record.partition_key).or_default() += purchase.cents,
                Err(_) => kcl_guest::warn!("record {} is not a purchase; skipped", record.sequence_number),
            }
        }
        let users: Vec<&str> = added.keys().copied().collect::<BTreeSet<_>>().into_iter().collect();
        for (user, total) in users.iter().zip(state::get_many_i64(&users)?) {
            state::set_i64(user, total.unwrap_or_default() + added[user])?;
        }
        checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))
    }

    fn close_window(&mut self, window: Window, keys: Vec<String>) -> Result<(), ProcessorError> {
        let users: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut totals = Outputs::new();
        for (user, total) in users.iter().zip(state::get_many_i64(&users)?) {
            let Some(cents) = total else { continue };
            let item = serde_json::json!({
                "user": user,
                "window_start_ms": window.start_ms,
                "window_end_ms": window.end_ms,
                "cents": cents,
                "shard_ended": window.shard_ended,
            });
            totals.push(user, item.to_string().as_bytes());
            state::delete(user)?;
        }
        let written = totals.len();
        if written > 0 {
            totals.send("totals")?;
        }
        kcl_guest::info!("window {}..{}: {written} totals", window.start_ms, window.end_ms);
        Ok(())
    }
}

kcl_guest::export_processor!(WindowTotals);
