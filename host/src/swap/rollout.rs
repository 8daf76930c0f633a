//! Rolling a new processor out over this worker's shards: one canary shard
//! (the busiest) first, the rest once it has processed some batches without
//! error — or, on a stream too idle to give it those batches, once it has
//! run [`CANARY_IDLE`] without error — and every shard back to the previous
//! version (kept compiled) if the new one fails too often while on
//! probation. A version rolled back is blocked for the rest of the worker's life.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::progress::RolloutReport;
use crate::metrics::Metrics;
use crate::runtime::Processor;

/// How long after the full rollout failures still count.
pub const PROBATION: Duration = Duration::from_secs(300);

/// How long a canary that has not had its batches yet (an idle stream) runs
/// without error before the rest swap: an idle stream must not hold a
/// rollout forever, and probation still rolls back on the first failures.
pub const CANARY_IDLE: Duration = Duration::from_secs(10);

/// How a new version is rolled out.
#[derive(Clone, Copy, Debug)]
pub struct SwapSettings {
    /// Batches the canary shard must process without error before the rest
    /// swap; 0 swaps every shard at once.
    pub canary_batches: u32,
    /// Failed calls (traps, deadlines, memory, `fatal`) on probation that
    /// roll the new version back.
    pub rollback_after: u32,
    /// Most record data all shards keep, together, to deliver again to the
    /// new instance after a swap (what came after each one's checkpoint).
    pub buffer_bytes: usize,
}

impl Default for SwapSettings {
    fn default() -> Self {
        Self { canary_batches: 3, rollback_after: 3, buffer_bytes: 256 << 20 }
    }
}

/// How one call of a processor version went, as a consumer reports it.
#[derive(Clone, Debug)]
pub struct CallReport {
    /// The version's hash.
    pub processor: String,
    /// Whether the call succeeded.
    pub ok: bool,
}

/// A version being rolled out.
struct Candidate {
    processor: Processor,
    previous: Processor,
    /// The canary shard, until the rest swap.
    canary: Option<String>,
    /// When the canary got it.
    offered: Instant,
    ok_batches: u32,
    failures: u32,
    /// When every shard got it; probation ends `PROBATION` later.
    everywhere_since: Option<Instant>,
}

/// This worker's processor versions.
pub struct Rollout {
    current: Processor,
    candidate: Option<Candidate>,
    blocked: HashSet<String>,
    settings: SwapSettings,
    metrics: Arc<Metrics>,
    /// Every version that was settled here, the first one first.
    history: Vec<String>,
}

/// Each running shard, by shard id.
pub type Shards<'a> = BTreeMap<&'a str, Shard<'a>>;

/// A running shard as the rollout sees it.
pub struct Shard<'a> {
    /// Its processor: a new value swaps it at the next batch boundary.
    pub processor: &'a watch::Sender<Processor>,
    /// Records it processed so far: the busiest shard is the canary.
    pub delivered: u64,
}

impl Rollout {
    /// A rollout that starts with every shard on `processor`.
    pub fn new(processor: Processor, settings: SwapSettings, metrics: Arc<Metrics>) -> Self {
        let history = vec![processor.describe().to_owned()];
        Self { current: processor, candidate: None, blocked: HashSet::new(), settings, metrics, history }
    }

    /// Each version this worker settled on, in order (for the exit summary).
    pub fn history(&self) -> &[String] {
        &self.history
    }

    /// `processor` is what new shards run from now on.
    fn settle(&mut self, processor: Processor) {
        self.history.push(processor.describe().to_owned());
        self.current = processor;
    }

    /// What a newly started shard runs: the settled version (the canary's
    /// candidate stays on the canary until it is promoted).
    pub fn current(&self) -> &Processor {
        &self.current
    }

    /// The version on trial, while one is (on its canary or on probation).
    pub fn candidate(&self) -> Option<&Processor> {
        self.candidate.as_ref().map(|trial| &trial.processor)
    }

    /// A new version was offered: the latest offer wins. It goes to one
    /// canary shard first — the shard already on a canary when one was
    /// running, so no shard goes back to an older version on its way. A
    /// version already everywhere (on probation) is settled: the new one
    /// builds on it and a rollback returns to it. The settled version
    /// offered again calls a canary off.
    pub fn offer(&mut self, processor: Processor, shards: Shards<'_>) {
        let (hash, described) = (processor.hash().to_owned(), processor.describe().to_owned());
        if self.blocked.contains(&hash) {
            return tracing::error!(processor = %described, "not swapping: this version was rolled back earlier");
        }
        if self.candidate.as_ref().is_some_and(|trial| trial.processor.hash() == hash) {
            return tracing::info!(processor = %described, "this version is being rolled out already");
        }
        // A candidate everywhere already is the settled version (`promote` settled it).
        let canary = self.candidate.take().and_then(|trial| trial.canary);
        if hash == self.current.hash() {
            if canary.is_some() {
                tracing::info!(processor = %described, "the latest offer wins: the canary goes back to this version");
                send_all(&self.current, &shards);
                self.tell();
            } else {
                tracing::info!(processor = %described, "every shard runs this version already");
            }
            return;
        }
        let previous = self.current.clone();
        let busiest = || shards.iter().max_by_key(|(key, shard)| (shard.delivered, std::cmp::Reverse(*key))).map(|(key, _)| key.to_string());
        let canary = canary.filter(|key| shards.contains_key(key.as_str())).or_else(busiest).filter(|_| self.settings.canary_batches > 0);
        match &canary {
            Some(shard) => {
                tracing::info!(processor = %described, shard, "canary: this shard runs the new version first");
                shards[shard.as_str()].processor.send_replace(processor.clone());
            }
            None => {
                tracing::info!(processor = %described, "no canary: every shard swaps");
                self.settle(processor.clone());
                send_all(&processor, &shards);
            }
        }
        let everywhere_since = canary.is_none().then(Instant::now);
        let offered = Instant::now();
        self.candidate = Some(Candidate { processor, previous, canary, offered, ok_batches: 0, failures: 0, everywhere_since });
        self.tell();
    }

    /// `shard` was processed to its end. When it was the canary, the rest
    /// swap at once (its children must not start on the old version, and an
    /// ended canary gets no more batches to judge by); probation goes on.
    pub fn shard_ended(&mut self, shard: &str, shards: Shards<'_>) {
        if self.candidate.as_ref().is_some_and(|trial| trial.canary.as_deref() == Some(shard)) {
            self.promote(shards, format!("the canary {shard} was processed to its end"));
        }
    }

    /// When the canary will have run [`CANARY_IDLE`], if one is on trial.
    pub fn canary_due(&self) -> Option<Instant> {
        self.candidate.as_ref().filter(|trial| trial.canary.is_some()).map(|trial| trial.offered + CANARY_IDLE)
    }

    /// [`Self::canary_due`] has come: the canary ran that long without
    /// failing often enough to roll back, so the rest swap.
    pub fn canary_idle(&mut self, shards: Shards<'_>) {
        if self.canary_due().is_some_and(|due| due <= Instant::now()) {
            let batches = self.candidate.as_ref().map_or(0, |trial| trial.ok_batches);
            self.promote(shards, format!("the canary ran {CANARY_IDLE:?} ({batches} batches) without failing"));
        }
    }

    /// Whether calls of `processor` count for a version on trial.
    pub fn on_trial(&self, processor: &str) -> bool {
        self.candidate.as_ref().is_some_and(|trial| trial.processor.hash() == processor)
    }

    /// A call ended: promotes the canary, rolls back, or ends probation.
    pub fn report(&mut self, report: &CallReport, shards: Shards<'_>) {
        let Some(trial) = &mut self.candidate else { return };
        if report.processor != trial.processor.hash() {
            return;
        }
        if !report.ok {
            trial.failures += 1;
            if trial.failures >= self.settings.rollback_after {
                return self.roll_back(shards);
            }
            return;
        }
        trial.ok_batches += 1;
        if trial.canary.is_some() && trial.ok_batches >= self.settings.canary_batches {
            let why = format!("the canary processed {} batches", trial.ok_batches);
            return self.promote(shards, why);
        }
        if trial.everywhere_since.is_some_and(|since| since.elapsed() >= PROBATION) {
            tracing::info!(processor = trial.processor.describe(), "the new version passed its probation");
            self.candidate = None;
            self.tell();
        }
    }

    /// The canary passed (`why`): every shard swaps, and probation starts.
    fn promote(&mut self, shards: Shards<'_>, why: String) {
        let Some(trial) = self.candidate.as_mut().filter(|trial| trial.canary.is_some()) else { return };
        tracing::info!(processor = trial.processor.describe(), "{why}: every shard swaps");
        trial.canary = None;
        trial.everywhere_since = Some(Instant::now());
        let processor = trial.processor.clone();
        send_all(&processor, &shards);
        self.settle(processor);
        self.tell();
    }

    fn roll_back(&mut self, shards: Shards<'_>) {
        let trial = self.candidate.take().expect("on trial");
        tracing::error!(
            processor = trial.processor.describe(),
            "rolling back to {} on every shard: the new version failed {} times on probation; it is blocked",
            trial.previous.describe(),
            trial.failures
        );
        self.metrics.rolled_back();
        self.blocked.insert(trial.processor.hash().to_owned());
        send_all(&trial.previous, &shards);
        self.settle(trial.previous);
        self.tell();
    }

    /// Reports where the rollout stands in the worker's progress row, for
    /// `status` and the dashboard.
    fn tell(&self) {
        let trial = self.candidate.as_ref();
        let probation_left = trial.and_then(|trial| trial.everywhere_since).map(|since| PROBATION.saturating_sub(since.elapsed()));
        let mut rolled_back: Vec<String> = self.blocked.iter().cloned().collect();
        rolled_back.sort();
        self.metrics.progress().rollout(RolloutReport {
            trial: trial.map(|trial| trial.processor.hash().to_owned()),
            canary: trial.and_then(|trial| trial.canary.clone()),
            probation_until_ms: probation_left.map(|left| crate::clock::unix_ms() + left.as_millis() as u64),
            rolled_back,
        });
    }
}

/// Gives every shard `processor` (those that run it already are left alone).
fn send_all(processor: &Processor, shards: &Shards<'_>) {
    for shard in shards.values() {
        if shard.processor.borrow().hash() != processor.hash() {
            shard.processor.send_replace(processor.clone());
        }
    }
}
