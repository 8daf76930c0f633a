//! A realistic processor: parses JSON events, keeps purchases, sums their
//! amounts per user, and checkpoints after each batch.
//!
//! Events look like `{"user": "u1", "kind": "purchase", "amount": 12.5}`.
//! Records that are not such events are counted as rejected and logged;
//! one bad record never stops the shard.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One event as producers write it.
#[derive(Deserialize)]
pub struct Event<'a> {
    #[serde(borrow)]
    pub user: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub kind: std::borrow::Cow<'a, str>,
    pub amount: f64,
}

/// Purchase totals per user: the logic, separate from the export so the
/// benchmark can run it natively.
#[derive(Default)]
pub struct Totals {
    pub per_user: BTreeMap<String, f64>,
    pub purchases: u64,
    pub rejected: u64,
}

impl Totals {
    /// Adds one record's payload.
    pub fn add(&mut self, data: &[u8]) {
        match serde_json::from_slice::<Event>(data) {
            Ok(event) if event.kind == "purchase" => {
                self.purchases += 1;
                match self.per_user.get_mut(event.user.as_ref()) {
                    Some(total) => *total += event.amount,
                    None => {
                        self.per_user.insert(event.user.into_owned(), event.amount);
                    }
                }
            }
            Ok(_) => {}
            Err(_) => self.rejected += 1,
        }
    }
}

/// The processor itself; off without the default `processor` feature, for
/// crates that only want [`Totals`].
#[cfg(feature = "processor")]
mod processor {
    use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo, ShutdownReason};

    use super::Totals;

    pub struct JsonAggregate {
        shard_id: String,
        totals: Totals,
    }

    impl RecordProcessor for JsonAggregate {
        fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
            Ok(JsonAggregate { shard_id: shard.shard_id, totals: Totals::default() })
        }

        fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
            let rejected_before = self.totals.rejected;
            for record in &batch {
                self.totals.add(record.data);
            }
            if self.totals.rejected > rejected_before {
                kcl_guest::warn!("{} records in this batch were not purchase events", self.totals.rejected - rejected_before);
            }
            checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))
        }

        fn shutdown(&mut self, reason: ShutdownReason, _: &Checkpointer) -> Result<(), ProcessorError> {
            let t = &self.totals;
            kcl_guest::info!(
                "{} {reason:?}: {} purchases, {} rejected, {} users",
                self.shard_id,
                t.purchases,
                t.rejected,
                t.per_user.len()
            );
            for (user, total) in &t.per_user {
                kcl_guest::info!("total {user} {total:.2}");
            }
            Ok(())
        }
    }

    // Exported only in the component: the benchmark links this crate natively
    // to run `Totals` as the baseline.
    #[cfg(target_arch = "wasm32")]
    kcl_guest::export_processor!(JsonAggregate);
}
