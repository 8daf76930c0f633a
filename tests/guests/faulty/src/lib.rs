//! A processor that misbehaves when a record's data tells it to, so tests
//! can check that each failure stays inside its own shard:
//!
//! - `panic`: panics (a trap)
//! - `spin`: loops forever (hits the call deadline)
//! - `stall`: busy for 3 s of wall-clock time, then goes on with the batch
//! - `hog`: allocates without end (hits the memory cap)
//! - `hold:<MiB>`: allocates that much and keeps it
//! - `retry`: returns a retryable error the first time it sees the record
//! - `fatal`: returns a fatal error
//! - `env`, `file`: tries to read the environment or a file and logs what it saw
//! - `checkpoint:<seq>`: checkpoints at `<seq>` and logs the outcome
//!
//! Any other record is logged as `record <sequence-number> <data>`.
//! `shutdown` fails when the last record seen was `fail-shutdown`.

use std::collections::HashSet;

use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo, ShutdownReason};

pub struct Faulty {
    retried: HashSet<String>,
    last: Vec<u8>,
    held: Vec<Vec<u8>>,
}

impl RecordProcessor for Faulty {
    fn initialize(_: ShardInfo) -> Result<Self, ProcessorError> {
        Ok(Faulty { retried: HashSet::new(), last: Vec::new(), held: Vec::new() })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        for record in &batch {
            let command = String::from_utf8_lossy(record.data);
            match command.as_ref() {
                "panic" => panic!("asked to panic at {}", record.sequence_number),
                "spin" => {
                    let mut n = 0u64;
                    loop {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                }
                "stall" => {
                    let start = std::time::Instant::now();
                    while start.elapsed() < std::time::Duration::from_secs(3) {
                        std::hint::spin_loop();
                    }
                    kcl_guest::info!("record {} stall", record.sequence_number);
                }
                "hog" => {
                    let mut hoard: Vec<Vec<u8>> = Vec::new();
                    loop {
                        hoard.push(vec![1; 1 << 20]);
                        std::hint::black_box(&hoard);
                    }
                }
                "retry" if self.retried.insert(record.sequence_number.to_owned()) => {
                    return Err(ProcessorError::retryable(format!("try {} again", record.sequence_number)));
                }
                "fatal" => return Err(ProcessorError::fatal("asked to fail")),
                "env" => kcl_guest::info!("env vars: {}", std::env::vars().count()),
                "file" => kcl_guest::info!("read /etc/hostname: {:?}", std::fs::read_to_string("/etc/hostname").map_err(|e| e.kind())),
                other => match (other.strip_prefix("checkpoint:"), other.strip_prefix("hold:").and_then(|mib| mib.parse::<usize>().ok())) {
                    (Some(seq), _) => kcl_guest::info!("checkpoint {seq}: {:?}", checkpointer.checkpoint_at_sequence(seq, None)),
                    (_, Some(mib)) => self.held.push(vec![1; mib << 20]),
                    _ => kcl_guest::info!("record {} {other}", record.sequence_number),
                },
            }
            self.last = record.data.to_vec();
        }
        Ok(())
    }

    fn shutdown(&mut self, _: ShutdownReason, _: &Checkpointer) -> Result<(), ProcessorError> {
        if self.last == b"fail-shutdown" {
            return Err(ProcessorError::fatal("asked to fail in shutdown"));
        }
        Ok(())
    }
}

kcl_guest::export_processor!(Faulty);
