//! What a shard does when something fails: the one place that maps a
//! failure, and how often it happened, to the next step. The failure policy
//! with dead letters (max retry attempts, record age, bisect) extends this.
//!
//! Two kinds of failure, each with its own [`Backoff`]:
//! - a batch the processor asked to have again (`retryable`): the same
//!   instance gets the same batch after a wait;
//! - anything that ends the instance (a fatal error, a trap, a deadline, a
//!   memory cap, `initialize` failing, a read failing): a fresh instance
//!   starts from the last checkpoint after a wait, which starts over once an
//!   instance ran [`HEALTHY`] without failing.
//!
//! What never counts as a failure: a call withdrawn because the lease's
//! validity ran out (the lease is lost, not the batch).

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::runtime::CallError;

/// First and longest wait before a retried batch or a restarted instance.
pub const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(30));
/// An instance that ran this long was healthy: the next failure starts the
/// restart backoff over.
pub const HEALTHY: Duration = Duration::from_secs(60);

/// The next step after a batch's `process-records` failed.
#[derive(Debug, PartialEq)]
pub enum BatchAction {
    /// Deliver the same batch to the same instance after `wait`.
    Retry { wait: Duration },
    /// The instance is done for: start a fresh one from the last checkpoint.
    Restart,
    /// The call was withdrawn: the lease's validity ran out.
    LeaseLost,
}

/// A shard's failure state, kept across its instances.
#[derive(Debug)]
pub struct FailurePolicy {
    restarts: Backoff,
    retries: Backoff,
    /// When the current instance started.
    started: Instant,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self { restarts: Backoff::new(BACKOFF.0, BACKOFF.1), retries: Backoff::new(BACKOFF.0, BACKOFF.1), started: Instant::now() }
    }
}

impl FailurePolicy {
    /// An instance starts: restart waits are measured from here.
    pub fn instance_started(&mut self) {
        self.started = Instant::now();
    }

    /// `process-records` failed with `error`.
    pub fn batch_failed(&mut self, error: &CallError) -> BatchAction {
        match error {
            CallError::Retryable(_) => BatchAction::Retry { wait: self.retries.next_wait() },
            CallError::Withdrawn => BatchAction::LeaseLost,
            _ => BatchAction::Restart,
        }
    }

    /// A batch was processed: the next retried batch waits the least again.
    pub fn batch_done(&mut self) {
        self.retries.reset();
    }

    /// The instance ended in a failure: how long to wait before the next
    /// one, less after an instance that was healthy for a while.
    pub fn restart_wait(&mut self) -> Duration {
        self.retries.reset();
        if self.started.elapsed() >= HEALTHY {
            self.restarts.reset();
        }
        self.restarts.next_wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn restarts_back_off_to_a_cap_and_start_over_after_a_healthy_instance() {
        let mut policy = FailurePolicy::default();
        let waits: Vec<Duration> = (0..8)
            .map(|_| {
                policy.instance_started();
                policy.restart_wait()
            })
            .collect();
        assert_eq!(waits[0], BACKOFF.0);
        assert_eq!(waits[1], BACKOFF.0 * 2);
        assert_eq!(*waits.last().unwrap(), BACKOFF.1, "capped");
        policy.instance_started();
        tokio::time::advance(HEALTHY).await;
        assert_eq!(policy.restart_wait(), BACKOFF.0, "a healthy instance resets it");
        policy.instance_started();
        assert_eq!(policy.restart_wait(), BACKOFF.0 * 2, "a quick failure after it doubles again");
    }

    #[test]
    fn only_a_retryable_error_keeps_the_instance_and_a_withdrawn_call_is_a_lost_lease() {
        let mut policy = FailurePolicy::default();
        let retry = |p: &mut FailurePolicy| p.batch_failed(&CallError::Retryable("later".into()));
        assert_eq!(retry(&mut policy), BatchAction::Retry { wait: BACKOFF.0 });
        assert_eq!(retry(&mut policy), BatchAction::Retry { wait: BACKOFF.0 * 2 });
        policy.batch_done();
        assert_eq!(retry(&mut policy), BatchAction::Retry { wait: BACKOFF.0 }, "a processed batch starts the retries over");
        for error in [CallError::Fatal("no".into()), CallError::Trap("boom".into()), CallError::DeadlineExceeded(BACKOFF.1), CallError::MemoryLimit(1 << 20)] {
            assert_eq!(policy.batch_failed(&error), BatchAction::Restart, "{error}");
        }
        assert_eq!(policy.batch_failed(&CallError::Withdrawn), BatchAction::LeaseLost);
    }
}
