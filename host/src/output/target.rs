//! What every target does: check a record before it is queued, and write
//! a list of records — retrying what failed, backing off, until it is
//! acknowledged or [`PATIENCE`] runs out.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::record::OutRecord;
use crate::backoff::Backoff;

/// How long one flush keeps retrying a target before it fails the flush
/// (the batch is then delivered again, and the flush tried again). Shorter
/// than the default call deadline (30 s): a flush inside a `checkpoint()`
/// runs within the processor's call.
pub const PATIENCE: Duration = Duration::from_secs(20);
/// Longest one request to a target may take: long enough for a slow but
/// working target (a request given up may still have written, and its
/// records are written again).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// First and longest wait between two tries.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// The future a [`Target`] returns.
pub type WriteFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Requests sent again, or records sent again after a partial failure,
/// counted as they happen (a write that fails in the end counts them too).
pub type Retries = AtomicU64;

/// A place outputs are written.
pub trait Target: Send + Sync {
    /// Why this target cannot take the record, if it cannot: checked when it
    /// is sent, so the processor hears of it then.
    fn check(&self, record: &OutRecord<'_>) -> Result<(), String>;

    /// Writes `records` in order, retrying until acknowledged or
    /// [`PATIENCE`] ran out (then says why); counts what it sends again in `retries`.
    fn write<'a>(&'a self, records: &'a [OutRecord<'a>], retries: &'a Retries) -> WriteFuture<'a>;
}

/// One attempt's outcome, for [`retrying`].
pub enum Attempt<T> {
    /// Done.
    Done(T),
    /// Try again after a backoff; the message says what went wrong.
    Again(String),
    /// Trying again cannot help.
    Fail(String),
}

/// Runs `attempt` until it is done, backing off between tries, each try at
/// most [`ATTEMPT_TIMEOUT`], for at most [`PATIENCE`]; counts the retries.
pub async fn retrying<T, F: Future<Output = Attempt<T>>>(target: &str, retries: &Retries, mut attempt: impl FnMut() -> F) -> Result<T, String> {
    let deadline = Instant::now() + PATIENCE;
    let mut backoff = Backoff::new(BACKOFF.0, BACKOFF.1);
    let mut retried = 0;
    loop {
        let error = match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt()).await {
            Ok(Attempt::Done(value)) => return Ok(value),
            Ok(Attempt::Fail(error)) => return Err(format!("{target}: {error}")),
            Ok(Attempt::Again(error)) => error,
            Err(_) => format!("no answer within {ATTEMPT_TIMEOUT:?}"),
        };
        let wait = backoff.next_wait();
        if Instant::now() + wait >= deadline {
            return Err(format!("{target}: {error} (still failing after {PATIENCE:?} of retries)"));
        }
        // The first retry of a write says why at once; the rest only at the end.
        if retried == 0 {
            tracing::warn!("output {target}: {error}; trying again (for up to {PATIENCE:?}; the shard's checkpoint waits)");
        } else {
            tracing::debug!("{target}: {error}; trying again in {wait:?}");
        }
        retried += 1;
        tokio::time::sleep(wait).await;
        retries.fetch_add(1, Ordering::Relaxed);
    }
}
