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
//! lane is done ([`progress`]).

mod lanes;
mod progress;

use std::collections::BTreeSet;
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
use crate::runtime::{Processor, ShardInstance, ShutdownReason};
use crate::worker::in_flight::InFlight;
use lanes::{Call, Lanes};
use progress::Progress;

/// Most often the host writes a parallel shard's checkpoint while it runs.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Record data read ahead for a shard's lanes before reading waits.
const QUEUED_BYTES: usize = 16 << 20;

/// One of the shard's instances, with its own failure state.
struct Lane {
    index: usize,
    instance: ShardInstance,
    policy: FailurePolicy,
    /// Where the instance's checkpoints (its own, and the failure policy's
    /// past records it gave up on) say this lane is done.
    done_through: Arc<StdMutex<Option<Position>>>,
    /// Shut down, or its call stopped: it cannot be called again.
    spent: bool,
}

/// The checkpoint the host last wrote, and when it tried.
struct Written {
    position: Option<Position>,
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
        let mut idle = Vec::with_capacity(n);
        for index in 0..n {
            let done_through = Arc::new(StdMutex::new(None));
            match self.open_lane_instance(&done_through, &running).await {
                Ok(instance) => idle.push(Some(Lane { index, instance, policy: FailurePolicy::new(&self.failure), done_through, spent: false })),
                Err(interrupt) => return interrupt,
            }
        }
        let range = lease.hash_range();
        let mut fetcher = self.reader.open(&self.stream, lease.key.shard_id(), start, range);
        let (mut lanes, mut progress) = (Lanes::new(n, self.call_records), Progress::default());
        let mut written = Written { position: lease.checkpoint.position().cloned(), at: Instant::now() };
        let mut calls = FuturesUnordered::new();
        let (mut reading, mut children, mut ending, mut swap_to) = (true, None, None, None);
        loop {
            if ending.is_none() && swap_to.is_none() {
                for slot in &mut idle {
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
                    return self.end_lanes(idle, ending, &progress, &mut written).await;
                }
                if let Some(to) = swap_to.take() {
                    // What the old version finished is checkpointed first, so
                    // a crash after the swap re-delivers only the new one's.
                    if let Err(interrupt) = self.write_progress(&progress, &mut written).await {
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
                    && let Some(children) = children.take()
                {
                    return self.end_shard_lanes(idle, children, &progress, &mut written).await;
                }
            }
            let read_more = reading && ending.is_none() && lanes.queued() < n * self.call_records && lanes.queued_bytes() < QUEUED_BYTES;
            let unwritten = progress.done_through().is_some() && progress.done_through() != written.position.as_ref();
            tokio::select! {
                Some((lane, call, interrupt)) = calls.next() => {
                    let index = lane.index;
                    match interrupt {
                        None => {
                            progress.done(&call.ordinals);
                            lanes.finished(index, &call);
                        }
                        Some(interrupt) => { ending.get_or_insert(interrupt); }
                    }
                    idle[index] = Some(lane);
                }
                fetched = fetcher.next(), if read_more => match fetched {
                    Ok(Fetched { batch, shard_end, reads, .. }) => {
                        self.metrics.get_records(reads);
                        self.metrics.millis_behind_latest(batch.millis_behind_latest);
                        if !lease.checkpoint.has_started() && first_delivered.is_none() {
                            *first_delivered = batch.get(0).map(|first| first.sequence_number.to_owned());
                        }
                        let first = progress.read(&batch);
                        lanes.route(&batch, first);
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
                _ = tokio::time::sleep_until(written.at + CHECKPOINT_EVERY), if unwritten && ending.is_none() => {
                    if let Err(interrupt) = self.write_progress(&progress, &mut written).await {
                        ending = Some(interrupt);
                    }
                }
            }
        }
    }

    /// Delivers `call` to `lane` under its failure policy; a failure that
    /// spends the instance restarts it (after the policy's wait) with the
    /// call's records it had not finished. With an interrupt when the lane
    /// cannot go on (its instance is then spent).
    async fn lane_call(&self, mut lane: Lane, mut call: Call, processor: Processor) -> (Lane, Call, Option<Interrupt>) {
        let mut rest = None;
        loop {
            let batch = rest.as_mut().unwrap_or(&mut call.records);
            let mut why = match self.deliver(&mut lane.instance, &processor, &mut lane.policy, batch).await {
                None => return (lane, call, None),
                Some(Interrupt::Failed(why)) => why,
                Some(interrupt) => {
                    lane.spent = true;
                    return (lane, call, Some(interrupt));
                }
            };
            // Its memory is the shard's again before a successor starts.
            lane.instance.retire();
            loop {
                let wait = lane.policy.restart_wait();
                self.metrics.restarted();
                tracing::warn!(shard = %self.held.key(), processor = processor.describe(), "{why}; restarting instance {} of {} in {wait:?}", lane.index + 1, self.parallelism);
                if let Some(outcome) = self.wait(wait).await {
                    lane.spent = true;
                    return (lane, call, Some(Interrupt::Done(outcome)));
                }
                lane.policy.instance_started();
                match self.open_lane_instance(&lane.done_through, &processor).await {
                    Ok(instance) => break lane.instance = instance,
                    Err(Interrupt::Failed(error)) => why = error,
                    Err(interrupt) => {
                        lane.spent = true;
                        return (lane, call, Some(interrupt));
                    }
                }
            }
            let done = lane.done_through.lock().expect("not poisoned").clone();
            rest = Some(match done {
                Some(done) => call.records.after(&done),
                None => call.records.slice(0, call.records.len()),
            });
        }
    }

    /// A fresh instance of `processor` for a lane whose checkpoints go to
    /// `done_through`.
    async fn open_lane_instance(&self, done_through: &Arc<StdMutex<Option<Position>>>, processor: &Processor) -> Result<ShardInstance, Interrupt> {
        let lease = self.held.snapshot().await;
        let sink = LaneSink { held: self.held.clone(), done_through: done_through.clone() };
        self.open(processor, &lease.checkpoint, lease.checkpoint.position().cloned(), Box::new(sink)).await
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
            lane.instance = self.open_lane_instance(&lane.done_through, to).await?;
        }
        self.metrics.swapped();
        tracing::info!(shard = %self.held.key(), processor = to.describe(), "swapped the processor on all {} instances", self.parallelism);
        Ok(())
    }

    /// Writes the shard's checkpoint where every record below is done, if
    /// it moved. A table that does not answer is tried again later.
    async fn write_progress(&self, progress: &Progress, written: &mut Written) -> Result<(), Interrupt> {
        written.at = Instant::now();
        let Some(position) = progress.done_through().filter(|p| Some(*p) != written.position.as_ref()) else { return Ok(()) };
        let result = self.held.checkpoint(Checkpoint::At(position.clone()), &BTreeSet::new()).await;
        self.metrics.checkpoint(result.is_ok());
        match result {
            Ok(()) => {
                written.position = Some(position.clone());
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
    /// lease is lost), and the instances hear why they stop.
    async fn end_lanes(&self, lanes: Vec<Option<Lane>>, ending: Interrupt, progress: &Progress, written: &mut Written) -> Interrupt {
        let ending = match ending {
            Interrupt::Done(Outcome::LeaseLost) => ending,
            _ => self.write_progress(progress, written).await.err().unwrap_or(ending),
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

    /// The shard is read to its end and every record is done:
    /// `shutdown(shard-end)` on each instance, then `SHARD_END`.
    async fn end_shard_lanes(&self, lanes: Vec<Option<Lane>>, children: BTreeSet<String>, progress: &Progress, written: &mut Written) -> Interrupt {
        // If an instance fails its shutdown, the next attempt starts here.
        if let Err(lost) = self.write_progress(progress, written).await {
            return self.end_lanes(lanes, lost, progress, written).await;
        }
        let mut instances: Vec<ShardInstance> = lanes.into_iter().flatten().map(|lane| lane.instance).collect();
        self.end_shard(&mut instances, children).await
    }
}
