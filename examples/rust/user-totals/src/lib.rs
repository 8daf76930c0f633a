//! Exactly-once totals: sums each user's purchases in the processor's
//! state, which kcl-host commits in the same write as the checkpoint. After
//! any crash, handoff, swap or reshard each user's total is exactly the sum
//! of the purchases up to the last checkpoint — never counted twice.
//!
//! Records are JSON like `{"user": "u1", "cents": 1250}`, put with the
//! user as partition key (a key's state lives with the shard its records go
//! to). Amounts are integer cents, so sums are exact. A record that is not
//! such an event is counted as rejected and logged.

use std::collections::{BTreeMap, BTreeSet};

use kcl_guest::state;
use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo};
use serde::Deserialize;

/// One purchase as producers write it.
#[derive(Deserialize)]
struct Purchase {
    cents: i64,
}

struct UserTotals {
    rejected: u64,
}

impl RecordProcessor for UserTotals {
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
        kcl_guest::info!("initialize {} at {}", shard.shard_id, shard.starting_checkpoint);
        Ok(UserTotals { rejected: 0 })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let retry = |e: kcl_guest::CheckpointError| ProcessorError::retryable(e.to_string());
        let mut purchases = Vec::with_capacity(batch.len());
        for record in &batch {
            match serde_json::from_slice::<Purchase>(record.data) {
                Ok(purchase) => purchases.push((record.partition_key, purchase.cents)),
                Err(_) => {
                    self.rejected += 1;
                    kcl_guest::warn!("record {} is not a purchase ({} rejected so far)", record.sequence_number, self.rejected);
                }
            }
        }
        // Every user's total in one read (the host reads the keys it has not cached).
        let users: Vec<&str> = purchases.iter().map(|(user, _)| *user).collect::<BTreeSet<_>>().into_iter().collect();
        let mut totals: BTreeMap<&str, i64> = users.iter().copied().zip(state::get_many_i64(&users)?.into_iter().map(Option::unwrap_or_default)).collect();
        for (user, cents) in purchases {
            *totals.entry(user).or_default() += cents;
        }
        for (user, total) in &totals {
            state::set_i64(user, *total)?;
        }
        // Commits every total with the checkpoint, in one write (however many users).
        checkpointer.checkpoint().map_err(retry)?;
        kcl_guest::info!("committed {} totals", totals.len());
        Ok(())
    }
}

kcl_guest::export_processor!(UserTotals);
