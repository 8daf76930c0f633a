//! A shard processed by several instances at once (`--parallelism N`).
//!
//! Each record goes to the lane of its key ([`lanes`]); each lane is an
//! instance with its own failure policy (retries, bisection, dead letters),
//! called with up to `--max-records` of its oldest records while the other
//! lanes run. A record is done when the call that had it returns ok (its
//! outputs written); within a call that failed, the records the policy gave
//! up on and those the instance checkpointed ("done up to here for my
//! keys") are not given to its next instance again. The host writes the
//! shard's checkpoint itself, at most once a second and whenever the shard
//! stops or swaps: the last position below which every record of every
//! lane is done ([`progress`]), with the state changes of the calls it
//! covers ([`state`]).

mod lanes;
mod progress;
mod state;
mod window;

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::hooks::LaneSink;
use super::{Interrupt, Outcome, ShardLoop};
use crate::aws::AwsError;
use crate::failure::FailurePolicy;
use crate::fetch::{Fetched, StartingPosition};
use crate::lease::coordinator::CheckpointFailure;
use crate::lease::{Checkpoint, Lease, LeaseStore};
use crate::records::Position;
use crate::runtime::{KeyedState, Processor, ShardInstance, ShutdownReason, StateChanges};
use crate::worker::in_flight::InFlight;
use lanes::{Call, Lanes};
use progress::Progress;
use state::{LaneSource, LaneStates};

/// Most often the host writes a parallel shard's checkpoint while it runs.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Record data read ahead for a shard's lanes before reading waits.
const QUEUED_BYTES: usize = 16 << 20;

/// One of the shard's instances, with its own failure state.
struct Lane {
    index: usize,
    instance: ShardInstance,
    policy: FailurePolicy,
    notes: Notes,
    /// The shard's state across its lanes.
    states: Arc<LaneStates>,
    /// Shut down, or its call stopped: it cannot be called again.
    spent: bool,
}

/// What a lane's instances note at their checkpoints (their own, and the
/// failure policy's past records it gave up on), kept across restarts.
#[derive(Clone, Default)]
struct Notes {
    /// Where they say the lane is done.
    done_through: Arc<StdMutex<Option<Position>>>,
    /// The state changes they covered in the current call.
    changes: Arc<StdMutex<StateChanges>>,
}

/// How far the shard is done and committed.
struct Done {
    progress: Progress,
    /// The finished calls' state changes not committed yet.
    states: Arc<LaneStates>,
    /// The host's last checkpoint covers the records below this ordinal.
    written_below: u64,
    /// That checkpoint (the lease's, until the host writes one).
    written: Option<Position>,
    /// When it last tried to write one.
    at: Instant,
}

impl<S: LeaseStore> ShardLoop<S> {
    /// One attempt at the shard with `self.parallelism` instances, from
    /// `start` until an outcome or a failure.
    pub(super) async fn attempt_parallel(&self, lease: &Lease, start: StartingPosition, first_delivered: &mut Option<String>) -> Interrupt {
        let n = self.parallelism;
        let mut running = self.processor.clone().borrow_and_update().clone();
        let mut offered = self.processor.clone();
        offered.mark_unchanged();
        if let Err(interrupt) = self.load_windows().await {
            return interrupt;
        }
        let states = Arc::new(LaneStates::new(self.state_source()));
        let mut idle = Vec::with_capacity(n);
        for index in 0..n {
            let notes = Notes::default();
            match self.open_lane_instance(&notes, &states, &running).await {
                Ok(instance) => idle.push(Some(Lane { index, instance, policy: FailurePolicy::new(&self.failure), notes, states: states.clone(), spent: false })),
                Err(interrupt) => return interrupt,
            }
        }
        let range = lease.hash_range();
        let mut fetcher = self.reader.open(&self.stream, lease.key.shard_id(), start, range);
        let mut lanes = Lanes::new(n, self.call_records);
        let mut done = Done { progress: Progress::default(), states, written_below: 0, written: lease.checkpoint.position().cloned(), at: Instant::now() };
        let (mut calls, mut held) = (FuturesUnordered::new(), VecDeque::new());
        let (mut reading, mut children, mut ending, mut swap_to) = (true, None, None, None);
        loop {
            if ending.is_none() && swap_to.is_none() {
                let drained = calls.is_empty() && lanes.queued() == 0;
                let closer = idle.iter_mut().flatten().find(|lane| drained && !lane.spent);
                if let Err(interrupt) = self.route_held(&mut held, &mut lanes, closer, &mut done).await {
                    ending = Some(interrupt);
                    continue;
                }
                for slot in idle.iter_mut().filter(|_| !done.states.full()) {
                    let Some(lane) = slot.take() else { continue };
                    match lanes.take(lane.index) {
                        Some(call) => calls.push(self.lane_call(lane, call, running.clone())),
                        None => *slot = Some(lane),
                    }
                }
            }
            let lag_records = lanes.spread();
            self.metrics.lanes(calls.len(), lag_records);
            self.in_flight.set(self.held.key(), Some(InFlight { instances: n, calls: calls.len(), lag_records }));
            if calls.is_empty() {
                // An ending wins over a swap: a lane may be spent.
                if let Some(ending) = ending {
                    return self.end_lanes(idle, ending, &mut done).await;
                }
                if let Some(to) = swap_to.take() {
                    // What the old version finished is checkpointed first, so
                    // a crash after the swap re-delivers only the new one's.
                    if let Err(interrupt) = self.write_progress(&mut done).await {
                        ending = Some(interrupt);
                        continue;
                    }
                    match self.swap_lanes(&mut idle, &to).await {
                        Ok(()) => running = to,
                        Err(interrupt) => ending = Some(interrupt),
                    }
                    continue;
                }
                if lanes.queued() == 0
                    && held.is_empty()
                    && let Some(children) = children.take()
                {
                    return self.end_shard_lanes(idle, children, &mut done).await;
                }
            }
            let read_more = reading && ending.is_none() && held.is_empty() && lanes.queued() < n * self.call_records && lanes.queued_bytes() < QUEUED_BYTES;
            let unwritten = done.progress.done_below() > done.written_below;
            tokio::select! {
                Some((lane, call, returned)) = calls.next() => {
                    let index = lane.index;
                    match returned {
                        Ok(changes) => {
                            done.states.finished(&call.ordinals, changes);
                            done.progress.done(&call.ordinals);
                            lanes.finished(index, &call);
                        }
                        Err(interrupt) => { ending.get_or_insert(interrupt); }
                    }
                    idle[index] = Some(lane);
                }
                fetched = fetcher.next(), if read_more => match fetched {
                    Ok(Fetched { batch, shard_end, reads, read_at_ms }) => {
                        self.metrics.get_records(reads);
                        self.metrics.millis_behind_latest(batch.millis_behind_latest);
                        if !lease.checkpoint.has_started() && first_delivered.is_none() {
                            *first_delivered = batch.get(0).map(|first| first.sequence_number.to_owned());
                        }
                        let first = done.progress.read(&batch);
                        self.hold(&mut held, batch, first, read_at_ms);
                        if shard_end.is_some() {
                            (reading, children) = (false, shard_end);
                        }
                    }
                    Err(AwsError::StreamNotFound(stream)) => {
                        ending = Some(Interrupt::Done(Outcome::Refused(format!(
                            "Kinesis stream `{stream}` no longer exists (it was deleted while this worker read it)"
                        ))));
                    }
                    Err(e) => ending = Some(Interrupt::Failed(format!("reading the shard failed: {e}"))),
                },
                outcome = self.interrupted(), if ending.is_none() => ending = Some(Interrupt::Done(outcome)),
                Ok(()) = offered.changed(), if swap_to.is_none() && ending.is_none() => swap_to = Some(offered.borrow_and_update().clone()),
                _ = tokio::time::sleep_until(done.at + CHECKPOINT_EVERY), if unwritten && ending.is_none() => {
                    if let Err(interrupt) = self.write_progress(&mut done).await {
                        ending = Some(interrupt);
                    }
                }
            }
        }
    }

    /// Delivers `call` to `lane` under its failure policy; a failure that
    /// spends the instance restarts it (after the policy's wait) with the
    /// call's records it had not finished. With the state changes the call
    /// made, or an interrupt when the lane cannot go on (its instance is
    /// then spent, and the call's changes dropped: its records come again).
    async fn lane_call(&self, mut lane: Lane, mut call: Call, processor: Processor) -> (Lane, Call, Result<StateChanges, Interrupt>) {
        let mut rest = None;
        loop {
            let batch = rest.as_mut().unwrap_or(&mut call.records);
            let mut why = match self.deliver(&mut lane.instance, &processor, &mut lane.policy, batch).await {
                None => {
                    let mut changes = std::mem::take(&mut *lane.notes.changes.lock().expect("not poisoned"));
                    changes.extend(lane.instance.take_state_changes());
                    return (lane, call, Ok(changes));
                }
                Some(Interrupt::Failed(why)) => why,
                Some(interrupt) => return lane.spend(call, interrupt),
            };
            // Its memory is the shard's again before a successor starts.
            lane.instance.retire();
            loop {
                let wait = lane.policy.restart_wait();
                self.metrics.restarted();
                tracing::warn!(shard = %self.held.key(), processor = processor.describe(), "{why}; restarting instance {} of {} in {wait:?}", lane.index + 1, self.parallelism);
                if let Some(outcome) = self.wait(wait).await {
                    return lane.spend(call, Interrupt::Done(outcome));
                }
                lane.policy.instance_started();
                match self.open_lane_instance(&lane.notes, &lane.states, &processor).await {
                    Ok(instance) => break lane.instance = instance,
                    Err(Interrupt::Failed(error)) => why = error,
                    Err(interrupt) => return lane.spend(call, interrupt),
                }
            }
            let done = lane.notes.done_through.lock().expect("not poisoned").clone();
            rest = Some(match done {
                Some(done) => call.records.after(&done),
                None => call.records.slice(0, call.records.len()),
            });
        }
    }

    /// A fresh instance of `processor` for a lane whose checkpoints go to
    /// `notes`, reading the state of its calls' keys through them and `states`.
    async fn open_lane_instance(&self, notes: &Notes, states: &Arc<LaneStates>, processor: &Processor) -> Result<ShardInstance, Interrupt> {
        let lease = self.held.snapshot().await;
        let sink = LaneSink { held: self.held.clone(), done_through: notes.done_through.clone(), noted: notes.changes.clone() };
        let state = KeyedState::of_call_keys(Arc::new(LaneSource { noted: notes.changes.clone(), shard: states.clone() }));
        self.open(processor, &lease.checkpoint, lease.checkpoint.position().cloned(), Box::new(sink), state).await
    }

    /// Every lane from its old version to `to`, between calls:
    /// `shutdown(requested)` on the old instance, then a new one. Nothing is
    /// delivered again: the records each call returned are done.
    async fn swap_lanes(&self, lanes: &mut [Option<Lane>], to: &Processor) -> Result<(), Interrupt> {
        for lane in lanes.iter_mut().flatten() {
            if let Err(e) = lane.instance.shutdown(ShutdownReason::Requested).await {
                tracing::warn!(shard = %self.held.key(), processor = lane.instance.processor(), "shutdown(requested) before the swap failed: {e}");
            }
            lane.instance.retire();
            lane.instance = self.open_lane_instance(&lane.notes, &lane.states, to).await?;
        }
        self.metrics.swapped();
        tracing::info!(shard = %self.held.key(), processor = to.describe(), "swapped the processor on all {} instances", self.parallelism);
        Ok(())
    }

    /// Writes the shard's checkpoint where every record below is done (or
    /// lower, so that it covers each finished call's state changes wholly
    /// or not at all), with the changes it covers, if it moved. A table
    /// that does not answer is tried again later.
    async fn write_progress(&self, done: &mut Done) -> Result<(), Interrupt> {
        done.at = Instant::now();
        let below = done.states.checkpoint_below(done.progress.done_below());
        let Some(position) = done.progress.position_below(below).filter(|_| below > done.written_below) else { return Ok(()) };
        let changes = done.states.changes_below(below);
        match self.committer().write(Checkpoint::At(position.clone()), &BTreeSet::new(), &changes).await {
            Ok(()) => {
                done.states.committed_below(below);
                done.progress.checkpointed_below(below);
                done.written_below = below;
                done.written = Some(position);
                Ok(())
            }
            Err(CheckpointFailure::LeaseLost) => Err(Interrupt::Done(Outcome::LeaseLost)),
            Err(CheckpointFailure::Unavailable(why)) => {
                tracing::warn!(shard = %self.held.key(), "writing the checkpoint at {position} failed: {why}; trying again in {CHECKPOINT_EVERY:?}");
                Ok(())
            }
        }
    }

    /// Every call has returned: what is done is checkpointed (unless the
    /// lease is lost), and the instances hear why they stop. State changes
    /// left uncommitted are dropped with their records' checkpoint: the
    /// records come again.
    async fn end_lanes(&self, lanes: Vec<Option<Lane>>, ending: Interrupt, done: &mut Done) -> Interrupt {
        let ending = match ending {
            Interrupt::Done(Outcome::LeaseLost) => ending,
            _ => self.write_progress(done).await.err().unwrap_or(ending),
        };
        let reason = match ending {
            Interrupt::Done(Outcome::LeaseLost) => ShutdownReason::LeaseLost,
            Interrupt::Done(Outcome::Stopped) => ShutdownReason::Requested,
            // A failure restarts the shard from the checkpoint with fresh instances.
            _ => return ending,
        };
        for mut lane in lanes.into_iter().flatten().filter(|lane| !lane.spent) {
            self.finish(&mut lane.instance, reason).await;
        }
        ending
    }

    /// The shard is read to its end and every record is done: the open
    /// window closed (`shard_ended`), `shutdown(shard-end)` on each
    /// instance, then `SHARD_END` — only once every record's state changes
    /// are committed.
    async fn end_shard_lanes(&self, mut lanes: Vec<Option<Lane>>, children: BTreeSet<String>, done: &mut Done) -> Interrupt {
        // If an instance fails its shutdown, the next attempt starts here.
        let closer = lanes.iter_mut().flatten().find(|lane| !lane.spent);
        let closed = match (self.windows.over(true, 0), closer) {
            (Some(window), Some(lane)) => self.close_lanes_window(lane, window, done).await,
            _ => self.write_progress(done).await,
        };
        if let Err(interrupt) = closed {
            return self.end_lanes(lanes, interrupt, done).await;
        }
        if done.written_below < done.progress.done_below() {
            let why = "the checkpoint at the shard's last record (with its state changes) could not be written, so SHARD_END was not".to_owned();
            return self.end_lanes(lanes, Interrupt::Failed(why), done).await;
        }
        let mut instances: Vec<ShardInstance> = lanes.into_iter().flatten().map(|lane| lane.instance).collect();
        self.end_shard(&mut instances, children).await
    }
}

impl Lane {
    /// The lane cannot go on: its instance is spent, and what its call
    /// noted is dropped (the call's records come again).
    fn spend(mut self, call: Call, interrupt: Interrupt) -> (Lane, Call, Result<StateChanges, Interrupt>) {
        self.spent = true;
        self.notes.changes.lock().expect("not poisoned").clear();
        (self, call, Err(interrupt))
    }
}
