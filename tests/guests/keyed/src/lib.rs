//! Counts records per key: each record bumps `keys_per_record` counters
//! (its partition key, then `<partition key>/<n>`), kept in kcl-host's state (`--var counts=state`,
//! the default) or in the instance's own map (`--var counts=memory`: the
//! same work without state), and checkpoints each batch — or, with
//! `--var checkpoint=marked`, only after a batch holding a record whose data
//! is `checkpoint` (never in `shutdown`: at a shard's end the host commits
//! what is left with `SHARD_END`).

use std::collections::HashMap;

use kcl_guest::state;
use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo};

struct Keyed {
    keys_per_record: usize,
    /// `None`: the counts are in state.
    memory: Option<HashMap<String, i64>>,
    /// Checkpoint only after a batch with a `checkpoint` record.
    marked: bool,
}

impl RecordProcessor for Keyed {
    fn initialize(_: ShardInfo) -> Result<Self, ProcessorError> {
        let keys_per_record = kcl_guest::config::get("keys_per_record").and_then(|n| n.parse().ok()).unwrap_or(1);
        let memory = (kcl_guest::config::get("counts").as_deref() == Some("memory")).then(HashMap::new);
        let marked = kcl_guest::config::get("checkpoint").as_deref() == Some("marked");
        Ok(Keyed { keys_per_record, memory, marked })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let retry = |e: kcl_guest::CheckpointError| ProcessorError::retryable(e.to_string());
        for record in &batch {
            // The first is the partition key itself: the key whose state lives on the record's shard.
            let keys: Vec<String> = (0..self.keys_per_record).map(|n| if n == 0 { record.partition_key.to_owned() } else { format!("{}/{n}", record.partition_key) }).collect();
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
        if self.marked && !batch.iter().any(|record| record.data == b"checkpoint") {
            return Ok(());
        }
        checkpointer.checkpoint().map_err(retry)
    }
}

kcl_guest::export_processor!(Keyed);
