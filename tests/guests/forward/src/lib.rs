//! Forwards every record to the output named by the variable `target`
//! (default `out`) as `<shard> <sequence number> <data>`, with the record's
//! partition key, then checkpoints the batch — so the output tests can tell,
//! for every lease-table checkpoint, which outputs must already be written.
//!
//! A record `http:<url>` is not forwarded: the processor GETs the URL and
//! logs the outcome (`http <url> <status>` or `http <url> failed: ...`).
//! The failure-policy tests' poison records: `trap` panics, `fail` returns
//! a fatal error, `fail-here` reports the batch failed at that record
//! (`failed-at`) — every time they are seen; `fail-long` is `fail` with a
//! 1 MiB message. A DynamoDB stream change whose image holds the string
//! attribute `poison` = `trap` is `trap` too. A record `flood:<MiB>` is not forwarded: the processor
//! prints that many MiB to stdout, in lines of 100 bytes. A record
//! `hog:<MiB>:<ms>` is not forwarded: the processor sends that many MiB of
//! outputs (64 KiB records, 16 a send), then holds its call that long (the
//! output buffer's fairness benchmark).
//! `initialize` logs the variable `greeting` when it is set. Each record is
//! logged as `record <sequence-number> <partition-key> <data>` — unless the
//! variable `quiet` is set (the output benchmark): then records are
//! forwarded as they came, untagged, and not logged. With the variable
//! `pause-ms`, each record first waits that long (a sleep through
//! `wasi:clocks`), as a processor calling a slow API per record would: the
//! parallelism tests.

use kcl_guest::output::Outputs;
use kcl_guest::{Batch, CheckpointError, Checkpointer, ProcessorError, RecordProcessor, ShardInfo};

/// How a change's JSON spells a `poison` attribute of `trap` (members sorted, no spaces).
const POISON_CHANGE: &[u8] = br#""poison":{"S":"trap"}"#;

pub struct Forward {
    shard: String,
    target: String,
    quiet: bool,
    pause: Option<std::time::Duration>,
}

impl RecordProcessor for Forward {
    fn initialize(shard: ShardInfo) -> Result<Self, ProcessorError> {
        if let Some(greeting) = kcl_guest::config::get("greeting") {
            kcl_guest::info!("var greeting={greeting}");
        }
        let target = kcl_guest::config::get("target").unwrap_or_else(|| "out".into());
        let pause = kcl_guest::config::get("pause-ms").and_then(|ms| ms.parse().ok()).map(std::time::Duration::from_millis);
        Ok(Forward { shard: shard.shard_id, target, quiet: kcl_guest::config::get("quiet").is_some(), pause })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let mut outputs = Outputs::new();
        for (index, record) in batch.iter().enumerate() {
            if let Some(pause) = self.pause {
                std::thread::sleep(pause);
            }
            match record.data {
                data if data.windows(POISON_CHANGE.len()).any(|w| w == POISON_CHANGE) => panic!("asked to trap at {}", record.sequence_number),
                b"trap" => panic!("asked to trap at {}", record.sequence_number),
                b"fail" => return Err(ProcessorError::fatal(format!("asked to fail at {}", record.sequence_number))),
                b"fail-long" => return Err(ProcessorError::fatal(format!("asked to fail at {} {}", record.sequence_number, "x".repeat(1 << 20)))),
                b"fail-here" => {
                    // The records before it are done: their outputs go.
                    self.send(std::mem::take(&mut outputs))?;
                    return Err(ProcessorError::failed_at(index, format!("asked to fail at {}", record.sequence_number)));
                }
                _ => {}
            }
            if self.quiet {
                // The benchmark: the record as it came, nothing logged.
                outputs.push(record.partition_key, record.data);
                continue;
            }
            let data = String::from_utf8_lossy(record.data);
            if let Some(mib) = data.strip_prefix("flood:").and_then(|n| n.parse::<usize>().ok()) {
                let line = format!("{}\n", "f".repeat(99));
                for _ in 0..(mib << 20) / line.len() {
                    print!("{line}");
                }
                continue;
            }
            if let Some((mib, ms)) = data.strip_prefix("hog:").and_then(|rest| rest.split_once(':')) {
                let (mib, ms) = (mib.parse::<usize>().unwrap_or(0), ms.parse::<u64>().unwrap_or(0));
                let chunk = vec![b'h'; 64 << 10];
                for _ in 0..mib {
                    let mut sends = Outputs::new();
                    for _ in 0..16 {
                        sends.push("hog", &chunk);
                    }
                    self.send(sends)?;
                }
                std::thread::sleep(std::time::Duration::from_millis(ms));
                continue;
            }
            if let Some(url) = data.strip_prefix("http:") {
                match waki::Client::new().get(url).connect_timeout(std::time::Duration::from_secs(2)).send() {
                    Ok(response) => kcl_guest::info!("http {url} {}", response.status_code()),
                    Err(e) => kcl_guest::info!("http {url} failed: {e}"),
                }
                continue;
            }
            kcl_guest::info!("record {} {} {data}", record.sequence_number, record.partition_key);
            outputs.push(record.partition_key, format!("{} {} {data}", self.shard, record.sequence_number).as_bytes());
        }
        self.send(outputs)?;
        match checkpointer.checkpoint() {
            Ok(()) => Ok(()),
            // The outputs could not be written (so neither was the checkpoint): try the batch again later.
            Err(CheckpointError::Unavailable(why)) => Err(ProcessorError::retryable(why)),
            Err(e) => Err(ProcessorError::fatal(e.to_string())),
        }
    }
}

impl Forward {
    fn send(&self, mut outputs: Outputs) -> Result<(), ProcessorError> {
        outputs.send(&self.target).map_err(|e| {
            kcl_guest::error!("send to `{}` refused: {e}", self.target);
            ProcessorError::fatal(e.to_string())
        })
    }
}

kcl_guest::export_processor!(Forward);
