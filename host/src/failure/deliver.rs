//! One batch delivered to an instance under the failure policy — the loop
//! `kcl-host run` and `kcl-host replay` share. The caller supplies
//! [`Hooks`]: how to wait (a worker stops waiting when its lease is lost),
//! and what to count and log.

use std::time::{Duration, Instant};

use super::dead_letter::{Condition, DeadLetters, GiveUp};
use super::policy::{keeps_instance, FailurePolicy, Step};
use super::retrying::Retrying;
use crate::clock;
use crate::records::Batch;
use crate::runtime::{CallError, CheckpointError, ShardInstance};

/// What the caller of [`deliver`] provides.
pub trait Hooks {
    /// Why delivery stopped early (the worker stopping, the lease lost).
    type Stop;
    /// Waits `wait`, unless delivery must stop first.
    fn pause(&self, wait: Duration) -> impl std::future::Future<Output = Result<(), Self::Stop>> + Send;
    /// Whether records may still be delivered.
    fn check(&self) -> Result<(), Self::Stop>;
    /// A call went through on `records` in `took`.
    fn processed(&self, records: &Batch, took: Duration);
    /// A call failed with `error`, and the policy said `step`; `blame` when
    /// the failure counts against the processor version.
    fn failed(&self, error: &CallError, step: &Step, blame: bool);
    /// `records` were given up on: written to the failure target, or
    /// skipped when there is none.
    fn gave_up(&self, records: usize, condition: Condition, kept: bool);
    /// The shard started or stopped retrying (`None`), or tried again.
    fn retrying(&self, state: Option<Retrying>);
}

/// How delivering a batch ended.
#[derive(Debug, PartialEq)]
pub enum Delivered<S> {
    /// Every record was processed or given up on.
    Done,
    /// The instance is spent: a fresh one starts from the last checkpoint
    /// (after [`FailurePolicy::restart_wait`]); the message says why.
    Restart(String),
    /// A hook said stop.
    Stopped(S),
    /// A call or a checkpoint found the lease lost.
    LeaseLost,
}

/// The shard and version a delivery is for, and where records given up on go.
pub struct Delivery<'a> {
    /// The shard's failure state.
    pub policy: &'a mut FailurePolicy,
    /// The failure target.
    pub dead_letters: &'a DeadLetters,
    /// The stream's name.
    pub stream: &'a str,
    /// The shard id.
    pub shard: &'a str,
    /// The processor version's hash (what the rollout knows it by).
    pub version: &'a str,
    /// The processor version as the logs and envelopes name it.
    pub processor: &'a str,
}

/// Delivers `batch` to `instance`: the whole batch in one call while
/// nothing fails; after a failure, the slices the policy says, with its
/// retries, partial checkpoints, bisection and give-ups. Records older than
/// `max-record-age` are given up on without a call.
pub async fn deliver<H: Hooks>(instance: &mut ShardInstance, batch: &mut Batch, delivery: Delivery<'_>, hooks: &H) -> Delivered<H::Stop> {
    let Delivery { policy, dead_letters, stream, shard, version, processor } = delivery;
    let mut from = 0;
    while from < batch.len() {
        if let Err(stop) = hooks.check() {
            return Delivered::Stopped(stop);
        }
        let old = policy.too_old(batch, from, clock::unix_ms());
        if old > 0 {
            let why = GiveUp { stream, shard, condition: Condition::RecordAgeExceeded, attempts: 0, error: "older than --max-record-age", processor };
            if let Some(end) = give_up(instance, &batch.slice(from, old), &why, dead_letters, hooks).await {
                return end;
            }
            from += old;
            continue;
        }
        let n = policy.next_slice(batch, from);
        // The batch itself while nothing fails: no copy.
        let mut slice = (n < batch.len()).then(|| batch.slice(from, n));
        let head = slice.as_mut().unwrap_or(batch);
        let started = Instant::now();
        let error = match instance.process_records(head).await {
            Ok(()) => {
                let was_retrying = policy.is_retrying();
                policy.succeeded(head);
                hooks.processed(head, started.elapsed());
                if was_retrying && !policy.is_retrying() {
                    hooks.retrying(None);
                }
                from += n;
                continue;
            }
            Err(error) => error,
        };
        let verdict = policy.failed(head, &error, version);
        hooks.failed(&error, &verdict.step, verdict.blame_version);
        hooks.retrying(policy.retrying());
        match verdict.step {
            Step::LeaseLost => return Delivered::LeaseLost,
            Step::Retry { restart: true, bisected, .. } => {
                let split = if bisected { "; splitting the batch to find the failing record" } else { "" };
                return Delivered::Restart(format!("process-records failed: {error}{split}"));
            }
            Step::Retry { wait, .. } => {
                if let Err(stop) = hooks.pause(wait).await {
                    return Delivered::Stopped(stop);
                }
            }
            Step::Partial { done, wait } => {
                if let Err(e) = instance.checkpoint_through(&head.slice(0, done)).await {
                    return checkpoint_failed(e, "the records before a partial failure");
                }
                from += done;
                if let Err(stop) = hooks.pause(wait).await {
                    return Delivered::Stopped(stop);
                }
            }
            Step::GiveUp { records, condition, attempts } => {
                let message = error.summary();
                let why = GiveUp { stream, shard, condition, attempts, error: &message, processor };
                if let Some(end) = give_up(instance, &head.slice(0, records), &why, dead_letters, hooks).await {
                    return end;
                }
                hooks.retrying(None);
                from += records;
                if !keeps_instance(&error) {
                    return Delivered::Restart(format!("process-records failed: {error}; gave up on {records} records, so the next instance starts after them"));
                }
            }
        }
    }
    Delivered::Done
}

/// Writes `records` to the failure target (again and again while it
/// fails: they may not be skipped before it acknowledged them), then
/// checkpoints past them. `None` when done.
async fn give_up<H: Hooks>(instance: &mut ShardInstance, records: &Batch, why: &GiveUp<'_>, dead_letters: &DeadLetters, hooks: &H) -> Option<Delivered<H::Stop>> {
    let mut wait = Duration::from_millis(500);
    while let Err(e) = dead_letters.write(records, why).await {
        tracing::warn!(shard = why.shard, "could not write {} records given up on to --on-failure: {e}; trying again in {wait:?} (the checkpoint waits)", records.len());
        if let Err(stop) = hooks.pause(wait).await {
            return Some(Delivered::Stopped(stop));
        }
        wait = (wait * 2).min(super::policy::BACKOFF_CAP);
    }
    hooks.gave_up(records.len(), why.condition, dead_letters.has_target());
    match instance.checkpoint_through(records).await {
        Ok(()) => None,
        Err(e) => Some(checkpoint_failed(e, "the records given up on")),
    }
}

fn checkpoint_failed<S>(error: CheckpointError, what: &str) -> Delivered<S> {
    match error {
        CheckpointError::LeaseLost => Delivered::LeaseLost,
        other => Delivered::Restart(format!("checkpointing {what} failed: {other:?}")),
    }
}
