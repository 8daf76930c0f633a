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
//!   (the second half follows once the first is through), without counting
//!   an attempt, until one record is left.
//! - Give up: once a range failed more than `max-retry-attempts` times; the
//!   caller dead-letters it and checkpoints past it.
//!
//! What never counts: a withdrawn call (the lease is lost, not the batch),
//! and outputs that could not be written (retried without limit).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use tokio::time::Instant;

use super::dead_letter::Condition;
use super::FailureSettings;
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

/// A shard that is retrying, for `status` (through the heartbeat) and the metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retrying {
    /// When the records first failed, in ms since the Unix epoch.
    pub since_ms: u64,
    /// Failed calls on the records now retried.
    pub attempts: u32,
    /// The last error.
    pub last_error: String,
    /// `max-retry-attempts`; `None` retries without limit.
    pub limit: Option<u32>,
}

/// The shards of a worker that are retrying now, as its heartbeat reports them.
#[derive(Debug, Default)]
pub struct RetryBoard(Mutex<BTreeMap<String, Retrying>>);

impl RetryBoard {
    /// `shard` is retrying (`Some`), or no longer is.
    pub fn set(&self, shard: &str, state: Option<Retrying>) {
        let mut shards = self.0.lock().expect("not poisoned");
        match state {
            Some(state) => shards.insert(shard.to_owned(), state),
            None => shards.remove(shard),
        };
    }

    /// Every shard retrying now.
    pub fn snapshot(&self) -> BTreeMap<String, Retrying> {
        self.0.lock().expect("not poisoned").clone()
    }
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
            let (wait, restart) = (self.settings.retry_backoff, !keeps_instance(error));
            if restart {
                self.next_restart = Some(wait);
            }
            return Verdict { step: Step::Retry { wait, restart, bisected: true }, blame_version };
        }
        if self.settings.max_retry_attempts.is_some_and(|max| failing.attempts > max) {
            let records = (0..head.len()).take_while(|i| head.position(*i).is_some_and(|p| p <= failing.last)).count();
            // Past the record at once: the fresh instance starts after it.
            if !keeps_instance(error) {
                self.next_restart = Some(Duration::ZERO);
            }
            let step = Step::GiveUp { records, condition: Condition::RetryAttemptsExhausted, attempts: failing.attempts };
            self.failing = failing.past_last();
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
mod tests {
    use super::*;
    use crate::records::Record;

    const BACKOFF: Duration = Duration::from_millis(100);

    fn settings(max: Option<u32>, bisect: bool) -> FailureSettings {
        FailureSettings { max_retry_attempts: max, bisect_on_error: bisect, retry_backoff: BACKOFF, ..FailureSettings::default() }
    }

    /// Records with sequence numbers `from..to`, arrived at `arrival` ms.
    fn batch(from: u32, to: u32) -> Batch {
        let seqs: Vec<String> = (from..to).map(|n| n.to_string()).collect();
        seqs.iter()
            .map(|seq| Record { data: b"", partition_key: "k", sequence_number: seq, sub_sequence_number: None, arrival_timestamp_ms: 1_000, explicit_hash_key: None })
            .collect()
    }

    fn trap() -> CallError {
        CallError::Trap("boom".into())
    }

    /// Runs the policy over `batch` with a processor that fails `calls`
    /// on any slice holding `poison`; returns the give-ups and the calls made.
    fn isolate(policy: &mut FailurePolicy, batch: &Batch, poison: &str) -> (Vec<String>, usize) {
        let (mut from, mut calls, mut given_up) = (0, 0, Vec::new());
        while from < batch.len() {
            let n = policy.next_slice(batch, from);
            let head = batch.slice(from, n);
            calls += 1;
            if !head.iter().any(|r| r.sequence_number == poison) {
                policy.succeeded(&head);
                from += n;
                continue;
            }
            match policy.failed(&head, &trap(), "v1").step {
                Step::GiveUp { records, .. } => {
                    given_up.extend(head.iter().take(records).map(|r| r.sequence_number.to_owned()));
                    from += records;
                }
                Step::Retry { restart, .. } => assert!(restart, "a trap ends the instance"),
                other => panic!("unexpected {other:?}"),
            }
            assert!(calls < 100, "no end");
        }
        (given_up, calls)
    }

    #[test]
    fn bisect_isolates_one_poison_record_in_a_batch_of_500_and_gives_up_on_it_alone() {
        let mut policy = FailurePolicy::new(&settings(Some(2), true));
        let (given_up, calls) = isolate(&mut policy, &batch(1000, 1500), "1321");
        assert_eq!(given_up, ["1321"]);
        // 9 halvings, 3 tries of the record alone, the halves that pass: far fewer than 500.
        assert!(calls < 30, "{calls} calls");
        assert_eq!(policy.retrying(), None, "nothing failing once it is given up");
    }

    #[test]
    fn without_bisect_the_whole_batch_is_given_up_after_its_attempts() {
        let mut policy = FailurePolicy::new(&settings(Some(2), false));
        let (given_up, calls) = isolate(&mut policy, &batch(10, 20), "15");
        assert_eq!(given_up.len(), 10, "Lambda's behaviour: the batch as a whole");
        assert_eq!(calls, 3, "one call and two retries");
    }

    #[test]
    fn unlimited_retries_never_give_up_and_back_off_to_the_cap() {
        let mut policy = FailurePolicy::new(&settings(None, false));
        let head = batch(1, 4);
        let waits: Vec<Duration> = (0..12)
            .map(|_| match policy.failed(&head, &CallError::Retryable("later".into()), "v1").step {
                Step::Retry { wait, restart: false, .. } => wait,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(waits[0], BACKOFF);
        assert_eq!(waits[1], BACKOFF * 2);
        assert_eq!(*waits.last().unwrap(), BACKOFF_CAP);
        let retrying = policy.retrying().unwrap();
        assert_eq!((retrying.attempts, retrying.limit), (12, None));
        assert!(retrying.last_error.contains("later"));
    }

    #[test]
    fn a_partial_failure_checkpoints_what_came_before_and_pins_the_record() {
        let mut policy = FailurePolicy::new(&settings(Some(1), false));
        let head = batch(1, 11);
        let failed_at = |i| CallError::FailedAt { index: i, reason: "bad".into() };
        assert_eq!(policy.failed(&head, &failed_at(4), "v1").step, Step::Partial { done: 4, wait: BACKOFF });
        // Delivered again from record 4: that record alone.
        assert_eq!(policy.next_slice(&head, 4), 1);
        let alone = head.slice(4, 1);
        let step = policy.failed(&alone, &failed_at(0), "v1").step;
        assert_eq!(step, Step::GiveUp { records: 1, condition: Condition::RetryAttemptsExhausted, attempts: 2 });
        assert_eq!(policy.next_slice(&head, 5), 5, "the rest as one batch");
    }

    #[test]
    fn records_before_a_failing_range_come_on_their_own_after_a_restart() {
        let mut policy = FailurePolicy::new(&settings(None, false));
        policy.failed(&batch(5, 9), &trap(), "v1");
        // Read again from an earlier checkpoint, in one batch: 1..5 first, then the range.
        let again = batch(1, 12);
        assert_eq!(policy.next_slice(&again, 0), 4);
        assert_eq!(policy.next_slice(&again, 4), 4);
        policy.succeeded(&again.slice(4, 4));
        assert_eq!(policy.next_slice(&again, 8), 3);
    }

    #[test]
    fn a_failure_on_records_another_version_failed_on_is_not_the_new_versions_fault() {
        let mut policy = FailurePolicy::new(&settings(None, false));
        let head = batch(1, 3);
        assert!(policy.failed(&head, &trap(), "settled").blame_version, "a new failure counts");
        assert!(!policy.failed(&head, &trap(), "candidate").blame_version, "it failed on the settled version too");
        assert!(!policy.failed(&head, &CallError::Retryable("x".into()), "other").blame_version, "a retryable error never counts");
    }

    #[test]
    fn outputs_and_lost_leases_are_never_counted() {
        let mut policy = FailurePolicy::new(&settings(Some(0), false));
        let head = batch(1, 3);
        for _ in 0..5 {
            let verdict = policy.failed(&head, &CallError::OutputsUnwritten("503".into()), "v1");
            assert!(matches!(verdict.step, Step::Retry { restart: false, .. }));
        }
        assert_eq!(policy.failed(&head, &CallError::Withdrawn, "v1").step, Step::LeaseLost);
        assert_eq!(policy.retrying(), None);
    }

    #[test]
    fn records_past_the_age_limit_are_counted_from_the_front() {
        let policy = FailurePolicy::new(&FailureSettings { max_record_age: Some(Duration::from_secs(60)), ..FailureSettings::default() });
        let mut records = batch(1, 5);
        records.arrival_timestamps_ms = vec![0, 1_000, 100_000, 1_000];
        assert_eq!(policy.too_old(&records, 0, 100_000), 2);
        assert_eq!(policy.too_old(&records, 2, 100_000), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn restarts_outside_a_batch_back_off_and_start_over_after_a_healthy_instance() {
        let mut policy = FailurePolicy::new(&settings(None, false));
        let waits: Vec<Duration> = (0..12)
            .map(|_| {
                policy.instance_started();
                policy.restart_wait()
            })
            .collect();
        assert_eq!(waits[0], BACKOFF);
        assert_eq!(*waits.last().unwrap(), BACKOFF_CAP, "capped");
        policy.instance_started();
        tokio::time::advance(HEALTHY).await;
        assert_eq!(policy.restart_wait(), BACKOFF, "a healthy instance resets it");
    }
}
