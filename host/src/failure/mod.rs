//! The failure policy: what happens to a record the processor keeps failing
//! on, with AWS Lambda's controls and names (its Kinesis event source
//! mapping): `max-retry-attempts`, `max-record-age`, `bisect-on-error`,
//! partial batch failures (`failed-at`, Lambda's `ReportBatchItemFailures`)
//! and an `on-failure` target — which, unlike Lambda's, gets the record
//! itself, in a [`DeadLetter`] envelope.
//!
//! One file per role: [`policy`] (the per-shard state: which records are
//! failing, how often, what to do next), [`dead_letter`] (the envelope and
//! where it goes), [`mod@deliver`] (a batch delivered under the policy, used
//! by `kcl-host run` and `kcl-host replay` alike) and [`retrying`] (what a
//! worker's heartbeat row reports of its shards retrying).
//!
//! What counts as a failure: an error the processor returns (`retryable`,
//! `fatal`, `failed-at`), a trap, the call deadline, the memory cap. What
//! never does, and is retried without limit: a read that failed or was
//! throttled, an output target that could not be written, a lease lost.

pub mod dead_letter;
pub mod deliver;
pub mod policy;
pub mod retrying;

use std::time::Duration;

use crate::output::TargetSpec;
pub use dead_letter::{Condition, DeadLetter, DeadLetters};
pub use deliver::{deliver, Delivered, Hooks};
pub use policy::FailurePolicy;

/// First wait before a failed batch is delivered again, by default; it
/// doubles with each attempt up to [`policy::BACKOFF_CAP`].
pub const RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// The operator's failure policy (per application: flags, `KCL_HOST_*`
/// variables or the config file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureSettings {
    /// Retries of a failing batch (or, with bisect, of a failing record)
    /// before it is given up on; `None` retries without limit (the default,
    /// as Lambda's -1: a default never drops data).
    pub max_retry_attempts: Option<u32>,
    /// Records older than this (from their arrival in Kinesis) are given up
    /// on without reaching the processor.
    pub max_record_age: Option<Duration>,
    /// Split a failing batch in halves until the failing record is alone;
    /// a split does not count as an attempt.
    pub bisect_on_error: bool,
    /// Where records given up on go; without it they are logged in full,
    /// counted and skipped.
    pub on_failure: Option<TargetSpec>,
    /// First wait before a failed batch is delivered again.
    pub retry_backoff: Duration,
}

impl Default for FailureSettings {
    fn default() -> Self {
        Self { max_retry_attempts: None, max_record_age: None, bisect_on_error: false, on_failure: None, retry_backoff: RETRY_BACKOFF }
    }
}

impl FailureSettings {
    /// Whether a record can ever be given up on.
    pub fn gives_up(&self) -> bool {
        self.max_retry_attempts.is_some() || self.max_record_age.is_some()
    }

    /// The start-up warning for a policy that drops records, if it does.
    pub fn drop_warning(&self) -> Option<String> {
        (self.gives_up() && self.on_failure.is_none()).then(|| {
            "--max-retry-attempts or --max-record-age is set without --on-failure: a record given up on is \
             logged in full and SKIPPED (dropped); name a target with --on-failure to keep it"
                .to_owned()
        })
    }
}
