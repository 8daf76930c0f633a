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
pub(crate) struct Checkpoints {
    sink: Box<dyn CheckpointSink>,
    last_checkpoint: Option<Position>,
    last_delivered: Option<Position>,
    lease_lost: bool,
}

impl Checkpoints {
    pub(crate) fn new(sink: Box<dyn CheckpointSink>, last_checkpoint: Option<Position>) -> Self {
        Self {
            sink,
            last_checkpoint,
            last_delivered: None,
            lease_lost: false,
        }
    }

    /// Notes the last record of a batch about to be delivered.
    pub(crate) fn delivering(&mut self, batch: &Batch) {
        if let Some(last) = batch.records.last() {
            // Sequence numbers come from Kinesis (or replay, which validates
            // its input), so one that does not parse cannot be checkpointed.
            self.last_delivered = Position::new(&last.sequence_number, last.sub_sequence_number).ok();
        }
    }

    /// Refuses every checkpoint from now on.
    pub(crate) fn lease_lost(&mut self) {
        self.lease_lost = true;
    }

    /// `checkpoint()`: the last record delivered.
    pub(crate) async fn checkpoint_last(&mut self) -> Result<(), CheckpointError> {
        match self.last_delivered.clone() {
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
        match &self.last_delivered {
            Some(last) if position <= *last => {}
            Some(last) => {
                return Err(CheckpointError::InvalidSequenceNumber(format!(
                    "{position} has not been delivered yet (the last record delivered is {last})"
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
            Err(CheckpointError::InvalidSequenceNumber(m)) if m.contains("not been delivered")
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
