//! Change data capture: a DynamoDB table's changes summed into state, run
//! with `kcl-host run table-totals.wasm --dynamodb-table orders` (or
//! `--stream <the table's stream ARN>`). The table's stream must carry both
//! images (NEW_AND_OLD_IMAGES).
//!
//! Items have an integer `amount`. For each partition key the processor
//! keeps `total/<pk>`, the sum of the amounts of that key's items, and for
//! each item `item/<pk>/<sk>`, the amount it last saw: an INSERT adds the
//! new amount, a MODIFY the difference, a REMOVE takes the old amount away.
//! A change whose old image does not match what the processor last saw
//! would mean a change was missed or came out of order: it is logged and
//! counted in `gaps/<pk>`. The state is committed with each checkpoint, so
//! every total is exact through crashes, handoffs and swaps.

use std::collections::BTreeMap;

use kcl_guest::{state, Batch, Change, Checkpointer, EventName, ProcessorError, RecordProcessor, ShardInfo};

/// An item's key as text (`pk/sk`), and its partition key.
fn item_key(change: &Change) -> (String, String) {
    let text = |name: &str| match change.keys.get(name) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let pk = text("pk");
    (format!("{pk}/{}", text("sk")), pk)
}

fn amount(image: Option<&serde_json::Value>) -> i64 {
    image.and_then(serde_json::Value::as_i64).unwrap_or(0)
}

struct TableTotals;

impl RecordProcessor for TableTotals {
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
        kcl_guest::info!("initialize {} of {} at {}", shard.shard_id, shard.stream_name, shard.starting_checkpoint);
        Ok(TableTotals)
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        // What this batch changed, read once and written once.
        let mut values: BTreeMap<String, Option<i64>> = BTreeMap::new();
        let read = |key: String, values: &mut BTreeMap<String, Option<i64>>| -> Result<Option<i64>, ProcessorError> {
            if let Some(value) = values.get(&key) {
                return Ok(*value);
            }
            let value = state::get_i64(&key)?;
            values.insert(key, value);
            Ok(value)
        };
        for (index, record) in batch.iter().enumerate() {
            let change = record.change().map_err(|e| ProcessorError::failed_at(index, e.to_string()))?;
            let (item, pk) = item_key(&change);
            let (new, old) = (amount(change.new("amount")), amount(change.old("amount")));
            let seen = read(format!("item/{item}"), &mut values)?;
            let expected_old = match change.event_name {
                EventName::Insert => None,
                EventName::Modify | EventName::Remove => Some(old),
            };
            if seen != expected_old {
                kcl_guest::warn!("{:?} of {item} at {}: saw {seen:?} last, the change says {expected_old:?}", change.event_name, change.sequence_number);
                let gaps = read(format!("gaps/{pk}"), &mut values)?.unwrap_or(0);
                values.insert(format!("gaps/{pk}"), Some(gaps + 1));
            }
            let total = read(format!("total/{pk}"), &mut values)?.unwrap_or(0);
            let (delta, now) = match change.event_name {
                EventName::Insert => (new, Some(new)),
                EventName::Modify => (new - old, Some(new)),
                EventName::Remove => (-old, None),
            };
            values.insert(format!("total/{pk}"), Some(total + delta));
            values.insert(format!("item/{item}"), now);
        }
        for (key, value) in &values {
            match value {
                Some(value) => state::set_i64(key, *value)?,
                None => state::delete(key)?,
            }
        }
        // Commits every change above with the checkpoint, in one write.
        checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))?;
        kcl_guest::info!("committed {} changes", batch.len());
        Ok(())
    }
}

kcl_guest::export_processor!(TableTotals);
