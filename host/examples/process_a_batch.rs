//! kcl-host as a library: load a processor component, give one instance a
//! batch of records, and see what it checkpoints — no AWS involved.
//!
//! ```sh
//! bash scripts/build-guests.sh
//! cargo run -p kcl-host --example process_a_batch -- examples/build/counter.wasm
//! ```

use std::path::PathBuf;

use kcl_host::records::{Batch, Position, Record};
use kcl_host::runtime::{CheckpointFuture, CheckpointSink, Processor, Runtime, RuntimeConfig, ShardInfo, ShutdownReason, StateChanges};

/// Prints each checkpoint instead of writing a lease table.
struct PrintCheckpoints;

impl CheckpointSink for PrintCheckpoints {
    fn checkpoint<'a>(&'a mut self, position: Position, _: &'a StateChanges) -> CheckpointFuture<'a> {
        println!("checkpoint at {position}");
        Box::pin(async { Ok(()) })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The guest's log lines and stdout arrive as tracing events.
    tracing_subscriber::fmt().with_target(false).init();
    let path: PathBuf = std::env::args_os().nth(1).ok_or("usage: process_a_batch <processor.wasm>")?.into();
    // One engine for every instance; compiled components are cached on disk.
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let processor = Processor::load(&runtime, &path).await?;
    println!("loaded {} (contract {})", processor.describe(), processor.contract_version());

    let mut instance = processor.instantiate("shardId-000000000000", Box::new(PrintCheckpoints), None).await?;
    instance.initialize(&ShardInfo::new("example-stream", "shardId-000000000000")).await?;

    let sequence_numbers: Vec<String> = (1..=3).map(|i| format!("4959{i:040}")).collect();
    let mut batch: Batch = sequence_numbers
        .iter()
        .zip(["hello", "from", "kcl-host"])
        .map(|(sequence_number, data)| Record {
            data: data.as_bytes(),
            partition_key: "example",
            sequence_number,
            sub_sequence_number: None,
            arrival_timestamp_ms: 0,
            explicit_hash_key: None,
        })
        .collect();
    instance.process_records(&mut batch).await?;
    println!("processed {} records", batch.len());
    instance.shutdown(ShutdownReason::ShardEnd).await?;
    Ok(())
}
