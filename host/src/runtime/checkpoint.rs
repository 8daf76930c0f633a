//! The guest's `checkpointer` import: validation here, the write elsewhere.
//!
//! The runtime checks that a checkpoint names a record this instance was
//! actually given and that it does not move backwards (as the Java KCL
//! does), then flushes the shard's outputs (a checkpoint is never ahead of
//! them); the [`CheckpointSink`] supplied by the caller then records it
//! with the state changes made since the last one, in one write (the fenced
//! lease write in `kcl-host run`, a printout in `kcl-host replay`).

use std::future::Future;
use std::pin::Pin;

use super::output::OutputSink;
use super::state::{KeyedState, StateChanges};
use super::CheckpointError;
use crate::records::{Batch, Position, Positions};

/// The future a [`CheckpointSink`] returns.
pub type CheckpointFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(), CheckpointError>> + Send + 'a>>;

/// Where a shard's validated checkpoints are written.
pub trait CheckpointSink: Send {
    /// Records that every record up to and including `position` is
    /// processed, and commits `state` (the changes made since the last
    /// checkpoint) in the same atomic write: both or neither.
    fn checkpoint<'a>(&'a mut self, position: Position, state: &'a StateChanges) -> CheckpointFuture<'a>;
}

/// A shard's checkpoint state inside one instance's store.
///
/// `checkpoint()` names the last record of the batch being processed while
/// a `process-records` call runs, and the last record of the last batch that
/// returned ok outside one: a batch that failed (or is waiting for a retry)
/// is never checkpointed by a later `shutdown`. Record indexes refer to
/// that same batch.
pub(crate) struct Checkpoints {
    sink: Box<dyn CheckpointSink>,
    /// The shard's outputs: flushed before every checkpoint write.
    pub(crate) outputs: Box<dyn OutputSink>,
    /// The shard's state: its changes are committed with every checkpoint.
    pub(crate) state: KeyedState,
    last_checkpoint: Option<Position>,
    /// The batch of the current `process-records` call.
    in_call: Option<Positions>,
    /// The last batch the processor returned ok for.
    acknowledged: Option<Positions>,
    /// The first record delivered to this instance: the earliest a
    /// checkpoint may name while the shard has none.
    first_delivered: Option<Position>,
    lease_lost: bool,
}

/// The largest sub-sequence number Java KCL can read back
/// (`checkpointSubSequenceNumber` is a Java `long`).
const MAX_SUB_SEQUENCE_NUMBER: u64 = i64::MAX as u64;

impl Checkpoints {
    pub(crate) fn new(sink: Box<dyn CheckpointSink>, outputs: Box<dyn OutputSink>, state: KeyedState, last_checkpoint: Option<Position>) -> Self {
        Self {
            sink,
            outputs,
            state,
            last_checkpoint,
            in_call: None,
            acknowledged: None,
            first_delivered: None,
            lease_lost: false,
        }
    }

    /// Notes a batch about to be delivered.
    pub(crate) fn delivering(&mut self, batch: &Batch) {
        self.in_call = (!batch.is_empty()).then(|| batch.positions());
        if self.first_delivered.is_none() {
            self.first_delivered = self.in_call.as_ref().and_then(|batch| batch.get(0));
        }
        self.state.placing(batch);
    }

    /// The `process-records` call ended: `ok` says whether its batch is processed.
    pub(crate) fn delivered(&mut self, ok: bool) {
        let batch = self.in_call.take();
        if ok && batch.is_some() {
            self.acknowledged = batch;
        }
    }

    /// The batch a checkpoint may reach into now.
    fn limit(&self) -> Option<&Positions> {
        self.in_call.as_ref().or(self.acknowledged.as_ref())
    }

    /// Refuses every checkpoint from now on.
    pub(crate) fn lease_lost(&mut self) {
        self.lease_lost = true;
    }

    /// `checkpoint()`: the last record of the current batch, or outside a
    /// call the last record processed.
    pub(crate) async fn checkpoint_last(&mut self) -> Result<(), CheckpointError> {
        match self.limit().and_then(Positions::last) {
            Some(position) => self.checkpoint_at(position).await,
            None if self.lease_lost => Err(CheckpointError::LeaseLost),
            None => Ok(()), // nothing delivered yet: nothing new to record
        }
    }

    /// `checkpoint-at-index(i)`: record `i` of the current batch (outside a
    /// call, of the last batch that returned ok).
    pub(crate) async fn checkpoint_at_index(&mut self, index: u32) -> Result<(), CheckpointError> {
        match self.limit().and_then(|batch| batch.get(index as usize)) {
            Some(position) => self.checkpoint_at(position).await,
            None => Err(CheckpointError::InvalidSequenceNumber(format!(
                "there is no record {index} in the batch (it has {} records)",
                self.limit().map_or(0, Positions::len)
            ))),
        }
    }

    /// `checkpoint-at(seq, sub)`. Without a sub-sequence number, the whole
    /// record when it is in the current batch (its last user record), else
    /// its first: a restart may deliver the rest of an aggregate again, but
    /// never skips any of it.
    pub(crate) async fn checkpoint_at_sequence(&mut self, sequence_number: &str, sub: Option<u64>) -> Result<(), CheckpointError> {
        let refuse = |why: String| Err(CheckpointError::InvalidSequenceNumber(why));
        if let Some(sub) = sub {
            if sub > MAX_SUB_SEQUENCE_NUMBER {
                return refuse(format!("sub-sequence number {sub} is more than Java KCL can read back (at most {MAX_SUB_SEQUENCE_NUMBER}, a Java long)"));
            }
            if let Some(last) = self.limit().and_then(|batch| batch.last_of(sequence_number))
                && sub > last.sub_sequence_number()
            {
                return refuse(format!("record {sequence_number} has no user record {sub} (its last is {})", last.sub_sequence_number()));
            }
        }
        let position = match sub {
            Some(sub) => Position::new(sequence_number, sub),
            None => match self.limit().and_then(|batch| batch.last_of(sequence_number)) {
                Some(position) => Ok(position),
                None => Position::new(sequence_number, 0),
            },
        };
        match position {
            Ok(position) => self.checkpoint_at(position).await,
            Err(e) => Err(CheckpointError::InvalidSequenceNumber(e.to_string())),
        }
    }

    /// Commits the state changes made since the last checkpoint with that
    /// same checkpoint, even when there are none: the sink may have its own
    /// changes to commit (a window's close).
    pub(crate) async fn commit_again(&mut self) -> Result<(), CheckpointError> {
        if self.lease_lost {
            return Err(CheckpointError::LeaseLost);
        }
        let Some(position) = self.last_checkpoint.clone() else {
            return Err(CheckpointError::InvalidSequenceNumber("nothing was checkpointed yet, so there is nothing to commit again".into()));
        };
        if let Err(e) = self.outputs.flush().await {
            return Err(CheckpointError::Unavailable(format!("the outputs could not be written, so the checkpoint was not: {e}")));
        }
        self.sink.checkpoint(position, self.state.pending()).await?;
        self.state.committed();
        Ok(())
    }

    /// A checkpoint at a record already delivered.
    pub(crate) async fn checkpoint_at(&mut self, position: Position) -> Result<(), CheckpointError> {
        if self.lease_lost {
            return Err(CheckpointError::LeaseLost);
        }
        match self.limit().and_then(Positions::last) {
            Some(last) if position <= last => {}
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
        if self.last_checkpoint.is_none()
            && let Some(first) = &self.first_delivered
            && position < *first
        {
            return Err(CheckpointError::InvalidSequenceNumber(format!(
                "{position} is before the first record delivered ({first}), and the shard has no checkpoint to go back to"
            )));
        }
        if let Some(previous) = &self.last_checkpoint {
            if position < *previous {
                return Err(CheckpointError::InvalidSequenceNumber(format!(
                    "{position} is before the last checkpoint {previous}"
                )));
            }
            if position == *previous && self.state.pending().is_empty() {
                return Ok(());
            }
        }
        if let Err(e) = self.outputs.flush().await {
            return Err(CheckpointError::Unavailable(format!("the outputs could not be written, so the checkpoint was not: {e}")));
        }
        self.sink.checkpoint(position.clone(), self.state.pending()).await?;
        self.state.committed();
        self.last_checkpoint = Some(position);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::output::{NoOutputs, OutputFuture, OutputRecords, SendError};
    use crate::records::Record;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<String>>>);

    impl CheckpointSink for Recorded {
        fn checkpoint<'a>(&'a mut self, position: Position, state: &'a StateChanges) -> CheckpointFuture<'a> {
            let changes: Vec<&str> = state.keys().map(String::as_str).collect();
            self.0.lock().unwrap().push(if changes.is_empty() { position.to_string() } else { format!("{position} {}", changes.join(",")) });
            Box::pin(async { Ok(()) })
        }
    }

    fn record(seq: &str, sub: Option<u64>) -> Record<'_> {
        Record { data: b"", partition_key: "k", sequence_number: seq, sub_sequence_number: sub, arrival_timestamp_ms: 0, explicit_hash_key: None }
    }

    fn batch(seqs: &[&str]) -> Batch {
        seqs.iter().map(|s| record(s, None)).collect()
    }

    fn no_state() -> KeyedState {
        KeyedState::unavailable("no state in these tests")
    }

    fn pos(s: &str) -> Position {
        Position::new(s, 0).unwrap()
    }

    #[tokio::test]
    async fn checkpoint_last_writes_the_last_delivered_record() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Box::new(NoOutputs), no_state(), None);
        cp.checkpoint_last().await.unwrap();
        cp.delivering(&batch(&["5", "7", "11"]));
        cp.checkpoint_last().await.unwrap();
        cp.checkpoint_last().await.unwrap(); // unchanged: no second write
        assert_eq!(*sink.0.lock().unwrap(), vec!["11"]);
    }

    #[tokio::test]
    async fn outside_a_call_checkpoint_means_the_last_batch_that_returned_ok() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Box::new(NoOutputs), no_state(), None);
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
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Box::new(NoOutputs), no_state(), Some(pos("3")));
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
    async fn refuses_what_java_kcl_could_not_read_back() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Box::new(NoOutputs), no_state(), None);
        let aggregate: Batch = [record("5", None), record("7", Some(0)), record("7", Some(1)), record("9", None)].into_iter().collect();
        cp.delivering(&aggregate);
        let refused = |result: Result<(), CheckpointError>, why: &str| matches!(result, Err(CheckpointError::InvalidSequenceNumber(m)) if m.contains(why));
        // No Java long holds it, whichever record it names.
        assert!(refused(cp.checkpoint_at_sequence("5", Some(u64::MAX)).await, "a Java long"));
        assert!(refused(cp.checkpoint_at_sequence("9", Some(1 << 63)).await, "a Java long"));
        // A user record the aggregate does not have.
        assert!(refused(cp.checkpoint_at_sequence("7", Some(2)).await, "no user record 2 (its last is 1)"));
        // Before the first record delivered, on a shard with no checkpoint.
        assert!(refused(cp.checkpoint_at_sequence("0", None).await, "before the first record delivered (5)"));
        assert!(refused(cp.checkpoint_at_sequence("4", Some(0)).await, "before the first record delivered"));
        cp.checkpoint_at_sequence("7", Some(1)).await.unwrap();
        assert_eq!(*sink.0.lock().unwrap(), vec!["7/1"]);
    }

    #[tokio::test]
    async fn refuses_everything_after_the_lease_is_lost() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Box::new(NoOutputs), no_state(), None);
        cp.delivering(&batch(&["5"]));
        cp.lease_lost();
        assert!(matches!(cp.checkpoint_last().await, Err(CheckpointError::LeaseLost)));
        assert!(sink.0.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_index_names_a_record_of_the_batch_and_a_whole_aggregate_is_its_last_user_record() {
        let sink = Recorded::default();
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Box::new(NoOutputs), no_state(), None);
        let aggregate: Batch = [record("5", None), record("7", Some(0)), record("7", Some(1)), record("9", None)].into_iter().collect();
        cp.delivering(&aggregate);
        cp.checkpoint_at_index(1).await.unwrap();
        cp.checkpoint_at_sequence("7", None).await.unwrap();
        assert!(matches!(cp.checkpoint_at_index(4).await, Err(CheckpointError::InvalidSequenceNumber(m)) if m.contains("no record 4")));
        cp.delivered(true);
        // Outside the call, indexes name the batch that returned ok.
        cp.checkpoint_at_index(3).await.unwrap();
        assert_eq!(*sink.0.lock().unwrap(), vec!["7", "7/1", "9"]);
    }

    /// Outputs whose flush fails until `ok` is set, noting each flush in
    /// the same log as the checkpoint writes.
    struct FlakyOutputs {
        log: Arc<Mutex<Vec<String>>>,
        ok: Arc<std::sync::atomic::AtomicBool>,
    }

    impl crate::runtime::output::OutputSink for FlakyOutputs {
        fn send(&mut self, _: String, _: OutputRecords) -> OutputFuture<'_, Result<(), SendError>> {
            Box::pin(async { Ok(()) })
        }

        fn flush(&mut self) -> OutputFuture<'_, Result<(), String>> {
            let ok = self.ok.load(std::sync::atomic::Ordering::Relaxed);
            self.log.lock().unwrap().push(format!("flush {}", if ok { "ok" } else { "failed" }));
            Box::pin(async move { if ok { Ok(()) } else { Err("target `out` is down".into()) } })
        }

        fn discard(&mut self) {}
    }

    #[tokio::test]
    async fn outputs_are_flushed_before_the_checkpoint_and_a_failed_flush_writes_no_checkpoint() {
        let sink = Recorded::default();
        let ok = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let outputs = FlakyOutputs { log: sink.0.clone(), ok: ok.clone() };
        let mut cp = Checkpoints::new(Box::new(sink.clone()), Box::new(outputs), no_state(), None);
        cp.delivering(&batch(&["5", "7"]));
        assert!(matches!(cp.checkpoint_last().await, Err(CheckpointError::Unavailable(m)) if m.contains("target `out` is down")));
        ok.store(true, std::sync::atomic::Ordering::Relaxed);
        cp.checkpoint_last().await.unwrap();
        assert_eq!(*sink.0.lock().unwrap(), vec!["flush failed", "flush ok", "7"]);
    }
}
