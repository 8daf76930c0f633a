//! `kcl-host replay`: a processor's lifecycle on records from a file (or
//! standard input), with what it sends printed, and a summary.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;

use super::{golden, read_records, replay, MemoryState, ReplayPolicy, ReplayReport, ReplaySinks};
use crate::failure::{DeadLetters, FailureSettings};
use crate::output::{OutputSpec, Outputs, Recording};
use crate::runtime::{Processor, Runtime, RuntimeConfig, ShardInfo};

/// What `kcl-host replay` was asked to do, its settings resolved.
pub struct ReplayCommand {
    /// The processor component.
    pub processor: PathBuf,
    /// The records file; `-` is standard input.
    pub input: PathBuf,
    /// Records per process-records call.
    pub batch_size: usize,
    /// The stream and shard the processor is told.
    pub shard: ShardInfo,
    /// The sandbox's limits.
    pub runtime: RuntimeConfig,
    /// The declared output targets, and the bytes they may queue.
    pub outputs: (Vec<OutputSpec>, usize),
    /// The failure policy.
    pub failure: FailureSettings,
    /// Where state is loaded from before and saved to after (`--state`);
    /// without it, state starts empty and is dropped.
    pub state_file: Option<PathBuf>,
    /// Tumbling windows of this length (`--window`).
    pub window: Option<std::time::Duration>,
    /// `--expect FILE`, and whether to write it (`--update-expected`).
    pub expect: Option<(PathBuf, bool)>,
}

/// Runs `command`, printing the summary; the error says what stopped it.
pub async fn run(command: ReplayCommand) -> Result<(), String> {
    let records = if command.input.as_os_str() == "-" {
        read_records(std::io::stdin().lock())
    } else {
        let file = File::open(&command.input).map_err(|e| format!("cannot open input `{}`: {e}", command.input.display()))?;
        read_records(BufReader::new(file))
    }
    .map_err(|e| format!("{}: {e}", command.input.display()))?;

    let config = RuntimeConfig { max_instances: 2, ..command.runtime };
    let recording = command.expect.as_ref().map(|_| Recording::default());
    let outputs = Outputs::printed(&command.outputs.0, command.outputs.1, recording.clone());
    let settings = command.failure;
    let dead_letters = DeadLetters::printed(&settings);
    let runtime = Runtime::new(config).map_err(|e| format!("cannot start wasmtime: {e}"))?;
    let processor = Processor::load(&runtime, &command.processor).await.map_err(|e| e.to_string())?;
    let policy = ReplayPolicy { settings: &settings, dead_letters: &dead_letters };
    let state = Arc::new(match &command.state_file {
        Some(path) => MemoryState::load(path)?,
        None => MemoryState::default(),
    });
    let sinks = ReplaySinks { print_checkpoints: true, outputs: &outputs, state: &state, window: command.window };
    let replayed = replay(&processor, command.shard, records, command.batch_size, sinks, Some(policy)).await;
    // What the checkpoints committed, also after a failure: the state a
    // worker would have found.
    if let Some(path) = &command.state_file {
        state.save(path)?;
        println!("state: {} keys saved to {}", state.len(), path.display());
    }
    match replayed {
        Ok(report) => {
            print_summary(&report);
            let (Some((path, update)), Some(recording)) = (&command.expect, recording) else { return Ok(()) };
            let sent = recording.lock().expect("not poisoned");
            println!("{}", golden::check(path, &golden::render(&sent, &report.checkpoints, &state), *update)?);
            Ok(())
        }
        Err(failure) => {
            print_summary(&failure.report);
            Err(failure.to_string())
        }
    }
}

fn print_summary(report: &ReplayReport) {
    let secs = report.elapsed.as_secs_f64();
    let rate = if secs > 0.0 { report.records as f64 / secs } else { 0.0 };
    println!(
        "replayed {} records in {} batches in {:.1} ms ({:.0} records/s); {} checkpoints, last {}",
        report.records,
        report.batches,
        secs * 1e3,
        rate,
        report.checkpoints.len(),
        report.checkpoints.last().map_or("none", String::as_str),
    );
    if report.given_up > 0 {
        println!("gave up on {} records", report.given_up);
    }
}
