//! Reading a shard one batch ahead of its processor, in a task of its own.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Fetched, ShardReader};
use crate::aws::AwsError;

/// Reads ahead in a task of its own while the caller processes: the next
/// read overlaps the processor's call, in order, exactly one batch ahead. A
/// shard therefore holds at most two responses in memory (the batch being
/// processed and the next one), each at most 10 MB / `max_records` records.
pub fn prefetch(mut reader: impl ShardReader) -> Prefetch {
    let (tx, batches) = mpsc::channel(1);
    let read_ahead = async move {
        loop {
            // Read only once the previous batch was taken by the caller.
            let Ok(slot) = tx.reserve().await else { return };
            let fetched = reader.next().await;
            let last = !matches!(&fetched, Ok(f) if f.shard_end.is_none());
            slot.send(fetched);
            if last {
                return;
            }
        }
    };
    let task = tokio::spawn(tracing::Instrument::in_current_span(read_ahead));
    Prefetch { batches, task }
}

/// A fetcher running ahead in its own task; stops it when dropped.
pub struct Prefetch {
    batches: mpsc::Receiver<Result<Fetched, AwsError>>,
    task: JoinHandle<()>,
}

impl Prefetch {
    /// The next records, in order. Cancel-safe.
    pub async fn next(&mut self) -> Result<Fetched, AwsError> {
        self.batches.recv().await.unwrap_or_else(|| {
            Err(AwsError::Service {
                operation: "GetRecords",
                code: "FetcherStopped".into(),
                message: "the shard's reader stopped unexpectedly".into(),
            })
        })
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
