//! Counts records per key: each record bumps `keys_per_record` counters
//! (`<partition key>/<n>`), kept in kcl-host's state (`--var counts=state`,
//! the default) or in the instance's own map (`--var counts=memory`: the
//! same work without state), and checkpoints each batch.

use std::collections::HashMap;

use kcl_guest::state;
use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo};

struct Keyed {
    keys_per_record: usize,
    /// `None`: the counts are in state.
    memory: Option<HashMap<String, i64>>,
}

impl RecordProcessor for Keyed {
    fn initialize(_: ShardInfo) -> Result<Self, ProcessorError> {
        let keys_per_record = kcl_guest::config::get("keys_per_record").and_then(|n| n.parse().ok()).unwrap_or(1);
        let memory = (kcl_guest::config::get("counts").as_deref() == Some("memory")).then(HashMap::new);
        Ok(Keyed { keys_per_record, memory })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let retry = |e: kcl_guest::CheckpointError| ProcessorError::retryable(e.to_string());
        for record in &batch {
            let keys: Vec<String> = (0..self.keys_per_record).map(|n| format!("{}/{n}", record.partition_key)).collect();
            if let Some(counts) = &mut self.memory {
                for key in keys {
                    *counts.entry(key).or_default() += 1;
                }
                continue;
            }
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            for (key, count) in refs.iter().zip(state::get_many_i64(&refs)?) {
                state::set_i64(key, count.unwrap_or(0) + 1)?;
            }
        }
        checkpointer.checkpoint().map_err(retry)
    }
}

kcl_guest::export_processor!(Keyed);
