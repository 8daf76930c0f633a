//! Helpers shared by the host's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::Write;
use std::sync::{Arc, Mutex};

use kcl_host::records::{Batch, Record};
use kcl_host::runtime::ShardInfo;
use kcl_host::runtime::{Processor, Runtime, RuntimeConfig};

pub use kcl_testkit::{guest, test_cache_dir};

/// A runtime that uses the tests' compile cache.
pub fn runtime(config: RuntimeConfig) -> Runtime {
    Runtime::new(RuntimeConfig { cache_dir: Some(test_cache_dir()), max_instances: 16, ..config }).unwrap()
}

pub async fn load(name: &str) -> Processor {
    Processor::load(&runtime(RuntimeConfig::default()), &guest(name)).await.unwrap()
}

pub fn shard(id: &str) -> ShardInfo {
    ShardInfo::new("test", id)
}

/// Records with the given payloads and sequence numbers `first`, `first + 1`, ...
pub fn batch(first: u64, payloads: &[&str]) -> Batch {
    let sequence_numbers: Vec<String> = (first..).take(payloads.len()).map(|seq| seq.to_string()).collect();
    payloads
        .iter()
        .zip(&sequence_numbers)
        .map(|(data, seq)| Record {
            data: data.as_bytes(),
            partition_key: "k",
            sequence_number: seq,
            sub_sequence_number: None,
            arrival_timestamp_ms: 0,
            explicit_hash_key: None,
        })
        .collect()
}

/// Log output captured from the current thread.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures every log event on this thread until the guard drops.
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
