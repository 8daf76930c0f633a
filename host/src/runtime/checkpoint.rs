//! The guest's `checkpointer` import: validation here, the write elsewhere.
//!
//! The runtime checks that a checkpoint names a record this instance was
//! actually given and that it does not move backwards (as the Java KCL
//! does); the [`CheckpointSink`] supplied by the caller then records it
//! (the fenced lease write in `kcl-host run`, a printout in `kcl-host replay`).

use std::future::Future;
use std::pin::Pin;

use super::bindings::{Batch, CheckpointError};
use super::sequence::Position;

/// The future a [`CheckpointSink`] returns.
pub type CheckpointFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(), CheckpointError>> + Send + 'a>>;

/// Where a shard's validated checkpoints are written.
pub trait CheckpointSink: Send {
    /// Records that every record up to and including `position` is processed.
    fn checkpoint(&mut self, position: Position) -> CheckpointFuture<'_>;
}

/// A shard's checkpoint state inside one instance's store.
///
/// `checkpoint()` names the last record of the batch being processed while
/// a `process-records` call runs, and the last record of the last batch that
/// returned ok outside one: a batch that failed (or is waiting for a retry)
/// is never checkpointed by a later `shutdown`.
pub(crate) struct Checkpoints {
    sink: Box<dyn CheckpointSink>,
    last_checkpoint: Option<Position>,
    /// The last record of the batch in the current `process-records` call.
    in_call: Option<Position>,
    /// The last record of the last batch the processor returned ok for.
    acknowledged: Option<Position>,
    lease_lost: bool,
}

impl Checkpoints {
    pub(crate) fn new(sink: Box<dyn CheckpointSink>, last_checkpoint: Option<Position>) -> Self {
        Self {
            sink,
            last_checkpoint,
            in_call: None,
            acknowledged: None,
            lease_lost: false,
        }
    }

    /// Notes the last record of a batch about to be delivered.
    pub(crate) fn delivering(&mut self, batch: &Batch) {
        // Sequence numbers come from Kinesis (or replay, which validates
        // its input), so one that does not parse cannot be checkpointed.
        self.in_call = batch.records.last().and_then(|last| Position::new(&last.sequence_number, last.sub_sequence_number).ok());
    }

    /// The `process-records` call ended: `ok` says whether its batch is processed.
    pub(crate) fn delivered(&mut self, ok: bool) {
        let batch_last = self.in_call.take();
        if ok && batch_last.is_some() {
            self.acknowledged = batch_last;
        }
    }

    /// The furthest record a checkpoint may name now.
    fn limit(&self) -> Option<&Position> {
        self.in_call.as_ref().or(self.acknowledged.as_ref())
    }

    /// Refuses every checkpoint from now on.
    pub(crate) fn lease_lost(&mut self) {
        self.lease_lost = true;
    }

    /// `checkpoint()`: the last record of the current batch, or outside a
    /// call the last record processed.
    pub(crate) async fn checkpoint_last(&mut self) -> Result<(), CheckpointError> {
        match self.limit().cloned() {
            Some(position) => self.checkpoint_at(position).await,
            None if self.lease_lost => Err(CheckpointError::LeaseLost),
            None => Ok(()), // nothing delivered yet: nothing new to record
        }
    }

    /// `checkpoint-at(seq, sub)`: a record already delivered.
    pub(crate) async fn checkpoint_at(&mut self, position: Position) -> Result<(), CheckpointError> {
        if self.lease_lost {
            return Err(CheckpointError::LeaseLost);
        }
        match self.limit() {
            Some(last) if position <= *last => {}
            Some(last) => {
                return Err(CheckpointError::InvalidSequenceNumber(format!(
                    "{position} has not been delivered yet, or its batch failed (the furthest record that can be checkpointed now is {last})"
                )));
            }
            None => {
                return Err(CheckpointError::InvalidSequenceNumber(format!(
                    "{position} has not been delivered: no records were delivered yet"
                )));
            }
        }
        if let Some(previous) = &self.last_checkpoint {
            if position < *previous {
                return Err(CheckpointError::InvalidSequenceNumber(format!(
                    "{position} is before the last checkpoint {previous}"
                )));
            }
            if position == *previous {
                return Ok(());
            }
        }
        self.sink.checkpoint(position.clone()).await?;
        self.last_checkpoint = Some(position);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::KinesisRecord;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<String>>>);

    impl CheckpointSink for Recorded {
        fn checkpoint(&mut self, position: Position) -> CheckpointFuture<'_> {
            self.0.lock().unwrap().push(position.to_string());
            Box::pin(async { Ok(()) })
        }
    }

    fn batch(seqs: &[&str]) -> Batch {
        Batch {
            records: seqs
                .iter()
                .map(|s| KinesisRecord {
                    data: vec![],
                    partition_key: "k".into(),
                    sequence_number: (*s).into(),
                    sub_sequence_number: None,
                    approximate_arrival_timestamp_ms: 0,
                    explicit_hash_key: None,
                })
                .collect(),
            millis_behind_latest: 0,
        }
    }

    fn pos(s: &str) -> Position {
        Position::new(s, None).unwrap()
    }

    #[tokio::test]
    async fn checkpoint_last_writes_the_last_delivered_record() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), None);
        cp.checkpoint_last().await.unwrap();
        cp.delivering(&batch(&["5", "7", "11"]));
        cp.checkpoint_last().await.unwrap();
        cp.checkpoint_last().await.unwrap(); // unchanged: no second write
        assert_eq!(*sink.0.lock().unwrap(), vec!["11"]);
    }

    #[tokio::test]
    async fn outside_a_call_checkpoint_means_the_last_batch_that_returned_ok() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), None);
        cp.delivering(&batch(&["5", "7"]));
        cp.delivered(true);
        // The next batch asks for a retry; then the worker stops and
        // shutdown(requested) checkpoints: only the processed batch counts.
        cp.delivering(&batch(&["9", "11"]));
        cp.delivered(false);
        cp.checkpoint_last().await.unwrap();
        assert!(matches!(
            cp.checkpoint_at(pos("11")).await,
            Err(CheckpointError::InvalidSequenceNumber(m)) if m.contains("has not been delivered yet, or its batch failed")
        ));
        assert_eq!(*sink.0.lock().unwrap(), vec!["7"]);
        // Delivered again, it can be checkpointed inside the call.
        cp.delivering(&batch(&["9", "11"]));
        cp.checkpoint_last().await.unwrap();
        assert_eq!(*sink.0.lock().unwrap(), vec!["7", "11"]);
    }

    #[tokio::test]
    async fn refuses_undelivered_and_backward_positions() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Some(pos("3")));
        assert!(matches!(
            cp.checkpoint_at(pos("5")).await,
            Err(CheckpointError::InvalidSequenceNumber(_))
        ));
        cp.delivering(&batch(&["5", "7"]));
        assert!(matches!(
            cp.checkpoint_at(pos("8")).await,
            Err(CheckpointError::InvalidSequenceNumber(m)) if m.contains("has not been delivered yet, or its batch failed")
        ));
        assert!(matches!(
            cp.checkpoint_at(pos("2")).await,
            Err(CheckpointError::InvalidSequenceNumber(m)) if m.contains("before the last checkpoint")
        ));
        cp.checkpoint_at(pos("5")).await.unwrap();
        assert_eq!(*sink.0.lock().unwrap(), vec!["5"]);
    }

    #[tokio::test]
    async fn refuses_everything_after_the_lease_is_lost() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), None);
        cp.delivering(&batch(&["5"]));
        cp.lease_lost();
        assert!(matches!(cp.checkpoint_last().await, Err(CheckpointError::LeaseLost)));
        assert!(sink.0.lock().unwrap().is_empty());
    }
}
