//! What state costs a processor: records/s of the `keyed` test guest with
//! its counts in kcl-host's state (1 and 16 keys per record; keys read
//! from the source the first time, from the cache after) beside the same
//! guest counting in its own memory; and what the state table would bill
//! per 1,000 records, from the reads and commits the host made.
//!
//! In-process: committed state lives in a map (as in `kcl-host replay`), so
//! the figures are the host's and the guest's side; a real table adds a
//! transaction's latency per checkpoint (measured apart, against moto, by
//! the acceptance tests' logs).
//!
//! Run with `bash scripts/build-guests.sh && cargo bench -p kcl-host --bench state`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use kcl_host::records::{Batch, Position, Record};
use kcl_host::replay::MemoryState;
use kcl_host::runtime::{
    CheckpointFuture, CheckpointSink, KeyedState, NoOutputs, Processor, Runtime, RuntimeConfig, ShardInfo, StateChanges, StateFuture, StateSource,
};
use kcl_testkit::guest;

const BATCH: usize = 500;
const BATCHES: usize = 40;
/// Distinct partition keys: every batch touches each of them 10 times.
const USERS: usize = 50;
/// On-demand, us-east-1 (as benches/bill.rs): a transactional write is two
/// write units per item up to 1 KB; a consistent read one read unit per 4 KB.
const DOLLARS_PER_WRITE_UNIT: f64 = 0.625e-6;
const DOLLARS_PER_READ_UNIT: f64 = 0.125e-6;

/// The committed state, counting what was read from it.
#[derive(Default)]
struct CountedState {
    values: MemoryState,
    keys_read: AtomicUsize,
    reads: AtomicUsize,
}

impl StateSource for CountedState {
    fn read<'a>(&'a self, keys: &'a [String]) -> StateFuture<'a, Result<Vec<Option<Vec<u8>>>, String>> {
        self.keys_read.fetch_add(keys.len(), Ordering::Relaxed);
        // One BatchGetItem per 100 keys.
        self.reads.fetch_add(keys.len().div_ceil(100), Ordering::Relaxed);
        self.values.read(keys)
    }
}

/// What the commits would cost in DynamoDB: requests, write and read units.
#[derive(Default)]
struct Bill {
    commits: usize,
    items: usize,
    requests: usize,
    write_units: usize,
    read_units: usize,
}

impl Bill {
    /// One checkpoint committing `items` changes of `bytes` bytes, as
    /// `lease::dynamo::commit` does it: one transaction (the lease row and
    /// the items, 2 units each up to 1 KB) up to 99 items, else the state
    /// log (`lease::state_log`): log items of ~350 KB, the checkpoint's
    /// `UpdateItem`, a transaction per 99 items with a condition check (2
    /// read units), an `UpdateItem` clearing the marker, the log's deletes.
    fn commit(&mut self, items: usize, bytes: usize) {
        self.commits += 1;
        self.items += items;
        let kib = |b: usize| b.div_ceil(1024).max(1);
        if items <= 99 {
            self.requests += 1;
            self.write_units += 2 * (items + 1);
            return;
        }
        let log_bytes = bytes + 9 * items;
        let parts = log_bytes.div_ceil(350_000);
        let groups = items.div_ceil(99);
        self.requests += parts + 1 + groups + 1 + parts.div_ceil(25);
        self.write_units += 2 * kib(log_bytes) + 1 + 2 * items + 1;
        self.read_units += 2 * groups;
    }
}

/// Commits each checkpoint's changes to the state, pricing them.
struct Commit {
    state: Arc<CountedState>,
    bill: Arc<std::sync::Mutex<Bill>>,
}

impl CheckpointSink for Commit {
    fn checkpoint<'a>(&'a mut self, _: Position, changes: &'a StateChanges) -> CheckpointFuture<'a> {
        if !changes.is_empty() {
            let bytes = changes.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
            self.bill.lock().unwrap().commit(changes.len(), bytes);
        }
        self.state.values.commit(changes);
        Box::pin(async { Ok(()) })
    }
}

fn batches() -> Vec<Batch> {
    let mut n = 0usize;
    (0..BATCHES)
        .map(|_| {
            let mut batch = Batch::default();
            for _ in 0..BATCH {
                n += 1;
                batch.push(Record {
                    data: b"{}",
                    partition_key: &format!("user-{}", n % USERS),
                    sequence_number: &format!("49{n:054}"),
                    sub_sequence_number: None,
                    arrival_timestamp_ms: 0,
                    explicit_hash_key: None,
                });
            }
            batch
        })
        .collect()
}

/// What one configuration did.
struct Run {
    records_per_second: f64,
    keys_read: usize,
    reads: usize,
    bill: Bill,
}

async fn run(counts: &str, keys_per_record: usize) -> Run {
    let vars = BTreeMap::from([("counts".to_owned(), counts.to_owned()), ("keys_per_record".to_owned(), keys_per_record.to_string())]);
    let runtime = Runtime::new(RuntimeConfig { vars, max_instances: 4, ..RuntimeConfig::default() }).unwrap();
    let processor = Processor::load(&runtime, &guest("keyed")).await.unwrap();
    let state = Arc::new(CountedState::default());
    let bill = Arc::new(std::sync::Mutex::new(Bill::default()));
    let sink = Commit { state: state.clone(), bill: bill.clone() };
    let keyed = KeyedState::new(state.clone(), None);
    let mut instance = processor.instantiate_with_outputs("shardId-0", Box::new(sink), Box::new(NoOutputs), keyed, None, None).await.unwrap();
    instance.initialize(&ShardInfo::new("bench", "shardId-0")).await.unwrap();
    let mut batches = batches();
    let started = Instant::now();
    for batch in &mut batches {
        instance.process_records(batch).await.unwrap();
    }
    let took = started.elapsed();
    drop(instance);
    Run {
        records_per_second: (BATCH * BATCHES) as f64 / took.as_secs_f64(),
        keys_read: state.keys_read.load(Ordering::Relaxed),
        reads: state.reads.load(Ordering::Relaxed),
        bill: Arc::try_unwrap(bill).ok().expect("the instance is gone").into_inner().unwrap(),
    }
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Compile once (the compile cache) before any timing.
    rt.block_on(run("memory", 1));
    let records = (BATCH * BATCHES) as f64;
    println!("{} batches of {BATCH} records over {USERS} keys; per 1,000 records:", BATCHES);
    println!("| counts | keys/record | records/s | vs memory | keys read | cache hits | requests | items written | $ |");
    for keys_per_record in [1, 16] {
        let memory = rt.block_on(run("memory", keys_per_record));
        let state = rt.block_on(run("state", keys_per_record));
        let per_k = |n: usize| n as f64 * 1000.0 / records;
        let touched = records as usize * keys_per_record;
        let bill = &state.bill;
        // Reads: one consistent BatchGetItem read unit per key (items under 4 KB).
        let dollars = per_k(bill.write_units) * DOLLARS_PER_WRITE_UNIT + per_k(bill.read_units + state.keys_read) * DOLLARS_PER_READ_UNIT;
        println!("| memory | {keys_per_record} | {:.0} | 1.00× | - | - | - | - | - |", memory.records_per_second);
        println!(
            "| state | {keys_per_record} | {:.0} | {:.2}× | {:.1} | {:.1}% | {:.2} ({:.2} reads, {:.2} for {:.2} commits of {:.0} items) | {:.1} | {:.6} |",
            state.records_per_second,
            state.records_per_second / memory.records_per_second,
            per_k(state.keys_read),
            100.0 * (touched - state.keys_read) as f64 / touched as f64,
            per_k(state.reads + bill.requests),
            per_k(state.reads),
            per_k(bill.requests),
            per_k(bill.commits),
            bill.items as f64 / bill.commits as f64,
            per_k(bill.items),
            dollars,
        );
    }
}
