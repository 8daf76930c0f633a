//! A shard's failure state, kept across its instances: which records are
//! failing and how often, and so what to do after each failed call.
//!
//! A failing range is named by positions, not by batch, so it survives a
//! restart that reads the shard again from its checkpoint (with other batch
//! boundaries): the records before the range are delivered on their own,
//! then the range alone, then the rest.
//!
//! - Retry: the range comes again after a backoff (from
//!   [`FailureSettings::retry_backoff`], doubling to [`BACKOFF_CAP`]); the
//!   same instance for a `retryable` error or `failed-at`, a fresh one from
//!   the last checkpoint for anything that ends the instance.
//! - Partial failure (`failed-at i`): the records before `i` are done; the
//!   range becomes record `i` alone.
//! - Bisect: a failing range of several records becomes its first half
//!   (the second half follows once the first is through), at once and
//!   without counting an attempt, until one record is left.
//! - Give up: once a range failed more than `max-retry-attempts` times; the
//!   caller dead-letters it and checkpoints past it, and the rest of the
//!   batch comes in one call.
//!
//! What never counts: a withdrawn call (the lease is lost, not the batch),
//! and outputs that could not be written (retried without limit).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::failure::retrying::Retrying;
use crate::failure::dead_letter::Condition;
use crate::failure::FailureSettings;
use crate::backoff::Backoff;
use crate::clock;
use crate::records::{Batch, Position};
use crate::runtime::CallError;

/// Longest wait before a failing batch comes again or an instance restarts.
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// An instance that ran this long was healthy: the next failure outside a
/// batch starts the restart backoff over.
pub const HEALTHY: Duration = Duration::from_secs(60);

/// The next step after a `process-records` call failed.
#[derive(Debug, PartialEq)]
#[allow(missing_docs)] // the fields are named in each variant's text
pub enum Step {
    /// Deliver the failing records again after `wait`: to the same instance,
    /// or to a fresh one from the last checkpoint when `restart`; `bisected`
    /// when only the first half of them comes next.
    Retry { wait: Duration, restart: bool, bisected: bool },
    /// The first `done` records of the call's batch are processed: the
    /// caller checkpoints them, then delivers the rest again after `wait`.
    Partial { done: usize, wait: Duration },
    /// Give up on the first `records` of the call's batch (all of it, or
    /// the record a `failed-at` named): dead-letter them, checkpoint past them.
    GiveUp { records: usize, condition: Condition, attempts: u32 },
    /// The call was withdrawn: the lease's validity ran out.
    LeaseLost,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Retry { bisected: true, .. } => f.write_str("splitting the batch to find the failing record"),
            Step::Retry { wait, restart: false, .. } => write!(f, "delivering the batch again in {wait:?}"),
            Step::Retry { wait, restart: true, .. } => write!(f, "restarting from the last checkpoint in {wait:?}"),
            Step::Partial { done, wait } => write!(f, "checkpointing the {done} records before it, then delivering again from it in {wait:?}"),
            Step::GiveUp { records, condition, attempts } => write!(f, "giving up on {records} records ({condition:?}) after {attempts} failed calls"),
            Step::LeaseLost => f.write_str("the lease's validity ran out"),
        }
    }
}

/// A step, and whether the failure counts against the processor version
/// that failed (for the rollout's automatic rollback).
#[derive(Debug, PartialEq)]
pub struct Verdict {
    /// What to do next.
    pub step: Step,
    /// Whether this failure speaks against the version: it ended the
    /// instance, on records that had not already failed on another version
    /// (a poison record fails on every version; it is no reason to roll back).
    pub blame_version: bool,
}

/// Where a failing range starts.
#[derive(Clone, Debug, PartialEq)]
enum Start {
    /// At this record.
    At(Position),
    /// Right after this record: the untried second half of a bisection.
    After(Position),
}

impl Start {
    /// Whether `p` comes before the range.
    fn is_after(&self, p: &Position) -> bool {
        match self {
            Start::At(first) => p < first,
            Start::After(before) => p <= before,
        }
    }

    /// Whether a call starting at `p` starts the range.
    fn starts_at(&self, p: &Position) -> bool {
        match self {
            Start::At(first) => p == first,
            Start::After(before) => p > before,
        }
    }
}

/// Records that failed and are being retried.
#[derive(Debug)]
struct Failing {
    start: Start,
    last: Position,
    /// The last records of the second halves a bisection has yet to
    /// deliver, the innermost last.
    halves: Vec<Position>,
    /// Failed calls on exactly this range.
    attempts: u32,
    /// When the records first failed, in ms since the Unix epoch.
    since_ms: u64,
    last_error: String,
    /// The versions that failed on these records (or on the range they
    /// were bisected from).
    versions: BTreeSet<String>,
}

impl Failing {
    /// The range is done with (processed, or given up on): the second half
    /// of the bisection it came from is next, if there is one.
    fn past_last(mut self) -> Option<Failing> {
        let upper = self.halves.pop()?;
        Some(Failing { start: Start::After(self.last), last: upper, attempts: 0, ..self })
    }
}

/// A shard's failure state.
#[derive(Debug)]
pub struct FailurePolicy {
    settings: FailureSettings,
    restarts: Backoff,
    /// For outputs that could not be written.
    outputs: Backoff,
    started: Instant,
    failing: Option<Failing>,
    /// The wait before the next restart, when a failed record decided it.
    next_restart: Option<Duration>,
}

impl FailurePolicy {
    /// A shard with nothing failing yet.
    pub fn new(settings: &FailureSettings) -> Self {
        Self {
            settings: settings.clone(),
            restarts: Backoff::new(settings.retry_backoff, BACKOFF_CAP),
            outputs: Backoff::new(settings.retry_backoff, BACKOFF_CAP),
            started: Instant::now(),
            failing: None,
            next_restart: None,
        }
    }

    /// An instance starts: restart waits are measured from here.
    pub fn instance_started(&mut self) {
        self.started = Instant::now();
    }

    /// How many records from `from` on are older than `max-record-age` at
    /// `now_ms` (milliseconds since the Unix epoch): they are given up on
    /// without reaching the processor.
    pub fn too_old(&self, batch: &Batch, from: usize, now_ms: u64) -> usize {
        let Some(age) = self.settings.max_record_age else { return 0 };
        let oldest_kept = now_ms.saturating_sub(age.as_millis() as u64);
        batch.arrival_timestamps_ms[from..].iter().take_while(|arrival| **arrival < oldest_kept).count()
    }

    /// How many records from `from` on to deliver in the next call: all of
    /// them, or when some are failing, those before the failing range, or
    /// the failing range alone.
    pub fn next_slice(&mut self, batch: &Batch, from: usize) -> usize {
        let rest = batch.len() - from;
        let (Some(failing), Some(start)) = (&self.failing, batch.position(from)) else { return rest };
        let count_while = |keep: &dyn Fn(&Position) -> bool| (from..batch.len()).take_while(|i| batch.position(*i).is_some_and(|p| keep(&p))).count();
        if failing.start.is_after(&start) {
            count_while(&|p| failing.start.is_after(p))
        } else if start <= failing.last {
            count_while(&|p| *p <= failing.last)
        } else {
            // Past it (a checkpoint covered it): nothing is failing any more.
            self.failing = None;
            rest
        }
    }

    /// The call on `head` (delivered as [`Self::next_slice`] said) failed
    /// with `error` on processor `version`.
    pub fn failed(&mut self, head: &Batch, error: &CallError, version: &str) -> Verdict {
        let not_counted = |step| Verdict { step, blame_version: false };
        match error {
            CallError::Withdrawn => return not_counted(Step::LeaseLost),
            CallError::OutputsUnwritten(_) => return not_counted(Step::Retry { wait: self.outputs.next_wait(), restart: false, bisected: false }),
            _ => {}
        }
        let (Some(first), Some(last)) = (head.position(0), head.position(head.len().saturating_sub(1))) else {
            return not_counted(Step::Retry { wait: self.settings.retry_backoff, restart: !keeps_instance(error), bisected: false });
        };
        let earlier = self.failing.take().filter(|f| !f.start.is_after(&last) && first <= f.last);
        let blame_version = !keeps_instance(error) && earlier.as_ref().is_none_or(|f| f.versions.iter().all(|v| v == version));
        let start = Start::At(first.clone());
        let mut failing = match earlier {
            // The same records again (or fewer, when a read from the checkpoint cut the batch shorter).
            Some(f) if f.start.starts_at(&first) => Failing { start, last: last.min(f.last), attempts: f.attempts + 1, ..f },
            Some(f) => Failing { start, last, attempts: 1, ..f },
            None => Failing {
                start,
                last,
                halves: Vec::new(),
                attempts: 1,
                since_ms: clock::unix_ms(),
                last_error: String::new(),
                versions: BTreeSet::new(),
            },
        };
        failing.last_error = error.summary();
        failing.versions.insert(version.to_owned());

        if let CallError::FailedAt { index, .. } = error {
            // The processor named the record: it alone is retried (and maybe given up on).
            let index = *index as usize;
            let pinned = head.position(index).expect("the runtime checked the index");
            if index > 0 {
                let wait = self.settings.retry_backoff;
                self.failing = Some(Failing { start: Start::At(pinned.clone()), last: pinned, attempts: 1, ..failing });
                return Verdict { step: Step::Partial { done: index, wait }, blame_version };
            }
            failing = Failing { last: pinned, ..failing };
        }
        if self.settings.bisect_on_error && head.len() > 1 && failing.last > first {
            let half = head.position(head.len() / 2 - 1).expect("in range");
            failing.halves.push(failing.last);
            self.failing = Some(Failing { last: half, attempts: 0, ..failing });
            // A split is not an attempt: its first half comes at once.
            let restart = !keeps_instance(error);
            if restart {
                self.next_restart = Some(Duration::ZERO);
            }
            return Verdict { step: Step::Retry { wait: Duration::ZERO, restart, bisected: true }, blame_version };
        }
        if self.settings.max_retry_attempts.is_some_and(|max| failing.attempts > max) {
            let records = (0..head.len()).take_while(|i| head.position(*i).is_some_and(|p| p <= failing.last)).count();
            // Past the record at once: the fresh instance starts after it.
            if !keeps_instance(error) {
                self.next_restart = Some(Duration::ZERO);
            }
            let step = Step::GiveUp { records, condition: Condition::RetryAttemptsExhausted, attempts: failing.attempts };
            // The record given up on may be all that failed: the rest of the
            // batch comes in one call (and is split again if it fails).
            self.failing = None;
            return Verdict { step, blame_version };
        }
        let wait = self.retry_wait(failing.attempts);
        let restart = !keeps_instance(error);
        if restart {
            self.next_restart = Some(wait);
        }
        self.failing = Some(failing);
        Verdict { step: Step::Retry { wait, restart, bisected: false }, blame_version }
    }

    /// The wait before attempt `attempts + 1`: the first backoff, doubling.
    fn retry_wait(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(16);
        (self.settings.retry_backoff * 2u32.pow(doublings)).min(BACKOFF_CAP)
    }

    /// The call on `head` went through: a failing range it covers is done.
    pub fn succeeded(&mut self, head: &Batch) {
        self.outputs.reset();
        let last = head.position(head.len().saturating_sub(1));
        if self.failing.as_ref().is_some_and(|f| last.as_ref().is_some_and(|last| *last >= f.last)) {
            self.failing = self.failing.take().and_then(Failing::past_last);
        }
    }

    /// Whether some records are failing.
    pub fn is_retrying(&self) -> bool {
        self.failing.is_some()
    }

    /// The shard is retrying: since when, how often, why.
    pub fn retrying(&self) -> Option<Retrying> {
        self.failing.as_ref().map(|f| Retrying {
            since_ms: f.since_ms,
            attempts: f.attempts,
            last_error: f.last_error.clone(),
            limit: self.settings.max_retry_attempts,
        })
    }

    /// The instance ended in a failure: how long to wait before the next
    /// one. A failed record decided it already; otherwise (`initialize`, a
    /// read) less after an instance that was healthy for a while.
    pub fn restart_wait(&mut self) -> Duration {
        if let Some(wait) = self.next_restart.take() {
            return wait;
        }
        if self.started.elapsed() >= HEALTHY {
            self.restarts.reset();
        }
        self.restarts.next_wait()
    }
}

/// Whether the same instance gets the records again (the processor asked
/// for that, or only its outputs failed), rather than a fresh one.
pub(crate) fn keeps_instance(error: &CallError) -> bool {
    matches!(error, CallError::Retryable(_) | CallError::FailedAt { .. } | CallError::OutputsUnwritten(_))
}

#[cfg(test)]
mod tests;
