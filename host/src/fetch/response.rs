//! The user records of a GetRecords or SubscribeToShard response.

use crate::aws::AwsError;
use crate::records::{kpl, Batch, Position, Record};

/// The user records of one response, in order: KPL aggregates
/// de-aggregated, user records outside `range` dropped, and — in the first
/// response after a start at a checkpoint — those the checkpoint covers.
pub(crate) fn user_records(
    shard: &str,
    records: &[aws_sdk_kinesis::types::Record],
    range: Option<&kpl::HashRange>,
    skip_through: &mut Option<Position>,
) -> Result<Batch, AwsError> {
    let mut batch = Batch::default();
    let mut dropped = 0;
    for record in records {
        // Checkpoints name sequence numbers: one that is not decimal is a server bug.
        Position::new(&record.sequence_number, 0).map_err(|e| AwsError::Service {
            operation: "GetRecords",
            code: "BadSequenceNumber".into(),
            message: format!("{shard} returned a record that cannot be checkpointed: {e}"),
        })?;
        let record = Record {
            data: record.data.as_ref(),
            partition_key: record.partition_key.as_deref().unwrap_or_default(),
            sequence_number: &record.sequence_number,
            sub_sequence_number: None,
            arrival_timestamp_ms: record.approximate_arrival_timestamp.and_then(|t| t.to_millis().ok()).map_or(0, |ms| ms.max(0) as u64),
            explicit_hash_key: None,
        };
        dropped += kpl::push(&mut batch, record, range);
    }
    if dropped > 0 {
        tracing::info!(shard, "dropped {dropped} user records of KPL aggregates outside this shard's hash keys (written before a reshard; the sibling shard has them)");
    }
    if !records.is_empty()
        && let Some(checkpoint) = skip_through.take()
    {
        batch = batch.after(&checkpoint);
    }
    Ok(batch)
}
