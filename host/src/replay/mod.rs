//! `kcl-host replay`: a processor's whole lifecycle on records from a file,
//! with no Kinesis, DynamoDB or network — the processor author's test loop.

pub mod command;
mod golden;
mod input;
mod state;
mod window;

pub use input::{read_records, InputError};
pub use state::MemoryState;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock;
use crate::failure::deliver::Delivery;
use crate::failure::policy::Step;
use crate::failure::retrying::Retrying;
use crate::failure::{self, Condition, DeadLetters, Delivered, FailurePolicy, FailureSettings, Hooks};
use crate::output::Outputs;
use crate::records::{Batch, Position};
use crate::runtime::{CallError, CheckpointFuture, CheckpointSink, KeyedState, Processor, ShardInfo, ShutdownReason, StateChanges};

/// What a replay did.
#[derive(Debug, Default)]
pub struct ReplayReport {
    /// Records delivered and acknowledged (again after a restart).
    pub records: usize,
    /// Batches delivered.
    pub batches: usize,
    /// Every checkpoint the processor made, in order.
    pub checkpoints: Vec<String>,
    /// Records given up on by the failure policy.
    pub given_up: usize,
    /// How long the replay took.
    pub elapsed: Duration,
}

/// A failed replay: the call that failed and how far it got.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed after {records_done} records: {error}")]
pub struct ReplayError {
    /// The call that failed (`initialize`, `process-records`, `shutdown`).
    pub call: String,
    /// Records processed before it.
    pub records_done: usize,
    /// How it failed.
    pub error: CallError,
    /// What the replay did up to then.
    pub report: ReplayReport,
}

/// Keeps each checkpoint for the report and applies its state changes,
/// and prints it as it happens when `print` is set.
#[derive(Clone)]
struct RecordingSink {
    checkpoints: Arc<Mutex<Vec<Position>>>,
    state: Arc<MemoryState>,
    print: bool,
    /// With windows: the keys the open window's checkpoints changed.
    window_keys: Option<Arc<Mutex<std::collections::BTreeSet<String>>>>,
}

impl CheckpointSink for RecordingSink {
    fn checkpoint<'a>(&'a mut self, position: Position, state: &'a StateChanges) -> CheckpointFuture<'a> {
        if self.print {
            match state.len() {
                0 => println!("checkpoint {position}"),
                changed => println!("checkpoint {position} (state: {changed} keys changed)"),
            }
        }
        self.state.commit(state);
        if let Some(keys) = &self.window_keys {
            let mut keys = keys.lock().expect("not poisoned");
            for key in state.keys() {
                keys.insert(key.clone());
            }
        }
        self.checkpoints.lock().expect("not poisoned").push(position);
        Box::pin(async { Ok(()) })
    }
}

impl RecordingSink {
    fn last(&self) -> Option<Position> {
        self.checkpoints.lock().expect("not poisoned").last().cloned()
    }
}

/// How a replay treats a failed call: as `kcl-host run` would with these
/// settings — or, when they never give a record up (the default), by
/// stopping at the first failure, which is what a processor author wants
/// to see.
pub struct ReplayPolicy<'a> {
    /// The failure policy.
    pub settings: &'a FailureSettings,
    /// Where records given up on go.
    pub dead_letters: &'a DeadLetters,
}

/// What the delivery loop tells a replay: counts, and the first failure
/// when the replay stops at it.
struct ReplayHooks {
    stop_at_failure: bool,
    failure: Mutex<Option<CallError>>,
    records: AtomicUsize,
    given_up: AtomicUsize,
}

impl Hooks for ReplayHooks {
    /// The failure that stopped the replay.
    type Stop = ();

    async fn pause(&self, wait: Duration) -> Result<(), ()> {
        self.check()?;
        tokio::time::sleep(wait).await;
        Ok(())
    }

    fn check(&self) -> Result<(), ()> {
        if self.failure.lock().expect("not poisoned").is_some() { Err(()) } else { Ok(()) }
    }

    fn processed(&self, records: &Batch, _: Duration) {
        self.records.fetch_add(records.len(), Ordering::Relaxed);
    }

    fn failed(&self, error: &CallError, step: &Step, _: bool) {
        if self.stop_at_failure {
            *self.failure.lock().expect("not poisoned") = Some(error.clone());
        } else if !matches!(step, Step::GiveUp { .. }) {
            println!("{}; {step}", error.summary());
        }
    }

    fn gave_up(&self, records: usize, condition: Condition, kept: bool) {
        self.given_up.fetch_add(records, Ordering::Relaxed);
        println!("gave up on {records} records ({condition:?}){}", if kept { "" } else { " and skipped them (no --on-failure)" });
    }

    fn retrying(&self, _: Option<Retrying>) {}
}

/// Where a replay's checkpoints, outputs and state go.
pub struct ReplaySinks<'a> {
    /// Print each checkpoint to stdout.
    pub print_checkpoints: bool,
    /// The output targets.
    pub outputs: &'a Arc<Outputs>,
    /// The state, changed by each checkpoint.
    pub state: &'a Arc<MemoryState>,
    /// Tumbling windows of this length (`--window`): closed by the
    /// records' arrival times, the last at the end.
    pub window: Option<Duration>,
}

/// Runs initialize, `records` in batches of `batch_size`, then
/// shutdown(shard-end), its checkpoints, outputs and state going to
/// `sinks`. A failed call stops the replay, unless `policy` can give
/// records up: then it goes as in `kcl-host run` (retries, bisection,
/// give-ups, a fresh instance from the last checkpoint after a trap).
pub async fn replay(
    processor: &Processor,
    shard: ShardInfo,
    records: Batch,
    batch_size: usize,
    sinks: ReplaySinks<'_>,
    policy: Option<ReplayPolicy<'_>>,
) -> Result<ReplayReport, ReplayError> {
    let started = Instant::now();
    let ReplaySinks { print_checkpoints, outputs, state, window } = sinks;
    let mut windows = window.map(window::ReplayWindows::new);
    let window_keys = windows.as_ref().map(window::ReplayWindows::keys);
    let sink = RecordingSink { checkpoints: Arc::default(), state: state.clone(), print: print_checkpoints, window_keys };
    let strict = FailureSettings::default();
    let no_target = DeadLetters::printed(&strict);
    let (settings, dead_letters) = policy.as_ref().map_or((&strict, &*no_target), |p| (p.settings, p.dead_letters));
    let hooks = ReplayHooks { stop_at_failure: !settings.gives_up(), failure: Mutex::new(None), records: AtomicUsize::new(0), given_up: AtomicUsize::new(0) };
    let mut failures = FailurePolicy::new(settings);
    let mut report = ReplayReport::default();
    let finish = |mut report: ReplayReport| {
        report.records = hooks.records.load(Ordering::Relaxed);
        report.given_up = hooks.given_up.load(Ordering::Relaxed);
        report.checkpoints = sink.checkpoints.lock().expect("not poisoned").iter().map(ToString::to_string).collect();
        report.elapsed = started.elapsed();
        report
    };
    let fail = |call: String, error: CallError, report: ReplayReport| {
        let report = finish(report);
        ReplayError { call, records_done: report.records, error, report }
    };
    let open = |last_checkpoint: Option<Position>| async {
        let keyed = KeyedState::new(state.clone(), None);
        let mut instance = processor
            .instantiate_with_outputs(&shard.shard_id, Box::new(sink.clone()), Box::new(outputs.shard()), keyed, last_checkpoint, None)
            .await
            .map_err(|e| ("instantiate", e))?;
        instance.initialize(&shard).await.map_err(|e| ("initialize", e))?;
        Ok(instance)
    };

    let mut instance = match open(None).await {
        Ok(instance) => instance,
        Err((call, e)) => return Err(fail(call.into(), e, report)),
    };
    let total = records.len();
    let mut next = 0;
    while next < total {
        let mut batch_len = batch_size.max(1);
        if let Some(windows) = &mut windows {
            batch_len = windows.batch_len(&records, next, batch_len);
            if let Err((call, e)) = windows.enter(&mut instance, records.arrival_timestamps_ms[next]).await {
                return Err(fail(call, e, report));
            }
        }
        let mut batch = records.slice(next, batch_len);
        let count = batch.len();
        batch.millis_behind_latest = behind_latest_ms(&batch, total - next - count);
        let described = processor.describe();
        let delivery = Delivery { policy: &mut failures, dead_letters, stream: &shard.stream_name, shard: &shard.shard_id, version: processor.hash(), processor: described };
        match failure::deliver(&mut instance, &mut batch, delivery, &hooks).await {
            Delivered::Done => {
                report.batches += 1;
                next += count;
            }
            Delivered::Restart(why) if !hooks.stop_at_failure => {
                let wait = failures.restart_wait();
                println!("{}; a fresh instance starts from the last checkpoint in {wait:?}", why.lines().next().unwrap_or_default());
                tokio::time::sleep(wait).await;
                let last = sink.last();
                next = last.as_ref().map_or(0, |last| records.iter().take_while(|r| r.position().is_ok_and(|p| p <= *last)).count());
                instance = match open(last).await {
                    Ok(instance) => instance,
                    Err((call, e)) => return Err(fail(call.into(), e, report)),
                };
            }
            Delivered::Restart(_) | Delivered::Stopped(()) | Delivered::LeaseLost => {
                let error = hooks.failure.lock().expect("not poisoned").take().unwrap_or(CallError::Withdrawn);
                let call = format!("process-records (batch {}, records {}..={})", report.batches + 1, next + 1, next + count);
                return Err(fail(call, error, report));
            }
        }
    }
    if let Some(windows) = &mut windows
        && let Err((call, e)) = windows.close(&mut instance, true).await
    {
        return Err(fail(call, e, report));
    }
    let result = instance.shutdown(ShutdownReason::ShardEnd).await;
    match result {
        Ok(()) => Ok(finish(report)),
        Err(e) => Err(fail("shutdown(shard-end)".into(), e, report)),
    }
}

/// 0 for the last batch; otherwise the gap between this batch's last record
/// and the input's newest, as Kinesis would report it.
fn behind_latest_ms(batch: &Batch, records_after: usize) -> u64 {
    if records_after == 0 {
        return 0;
    }
    let now = clock::unix_ms();
    batch.arrival_timestamps_ms.last().map_or(0, |arrival| now.saturating_sub(*arrival))
}

