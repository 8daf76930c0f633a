//! Outputs: what the output path costs, and what writing before each
//! checkpoint adds, against native baselines.
//!
//! - `call`: the `forward` guest sends every record of a batch (100-byte
//!   records) to a target that writes nothing; records/s through the
//!   guest→host output call, the host's checks and its queue, beside the
//!   same batches delivered to the `noop` guest.
//! - `kinesis`: batches of 500 records of 100 bytes through the `forward`
//!   guest to a Kinesis output on the local server (one flush per batch,
//!   before its checkpoint), against a native loop of PutRecords calls of
//!   the same 500 records with the same client.
//! - `flush`: the time a batch's call takes with its outputs written before
//!   its checkpoint, minus the same call with nothing to write: the latency
//!   a checkpoint gains from the flush.
//! - `stall`: a `kcl-host run` worker forwarding 4 shards to a Kinesis
//!   output with `--output-buffer-mib 4`, 3 shards written 4 records a
//!   second each; in the second run one shard's processor also sends 16 MiB
//!   of outputs in one call and holds the call 5 s (a `hog:16:5000`
//!   record); the third is the second with a 64 MiB buffer, which the hog
//!   never fills. The latency of the other shards' records (input arrival
//!   to output arrival) in each: a shard over its share of the buffer must
//!   wait on its own writes, not hold the others'.
//!
//! Run with `bash scripts/build-guests.sh && bash scripts/servers.sh start &&
//! source .servers/env && cargo bench -p kcl-host --bench outputs`; figures
//! go in docs/BENCHMARKS.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use kcl_host::lease::dynamo::DynamoStore;
use kcl_host::lease::LeaseStore;
use kcl_host::output::{OutputSpec, Outputs, TargetSpec};
use kcl_host::records::{Batch, Position, Record};
use kcl_host::runtime::{CheckpointFuture, CheckpointSink, KeyedState, Processor, Runtime, RuntimeConfig, ShardInfo, ShardInstance, StateChanges};
use kcl_testkit::{guest, unique, StreamRecord, TestStream};

const RECORD_BYTES: usize = 100;
const BATCH: usize = 500;

struct Discard;

impl CheckpointSink for Discard {
    fn checkpoint<'a>(&'a mut self, _: Position, _: &'a StateChanges) -> CheckpointFuture<'a> {
        Box::pin(async { Ok(()) })
    }
}

fn batch(size: usize, first: usize) -> Batch {
    let data = "x".repeat(RECORD_BYTES);
    let keys: Vec<String> = (0..size).map(|i| format!("k{}", i % 64)).collect();
    let seqs: Vec<String> = (0..size).map(|i| format!("49{:054}", first + i)).collect();
    (0..size)
        .map(|i| Record {
            data: data.as_bytes(),
            partition_key: &keys[i],
            sequence_number: &seqs[i],
            sub_sequence_number: None,
            arrival_timestamp_ms: 0,
            explicit_hash_key: None,
        })
        .collect()
}

fn runtime(vars: &[(&str, &str)]) -> Runtime {
    let vars: BTreeMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Runtime::new(RuntimeConfig { cache_dir: Some(kcl_testkit::test_cache_dir()), max_instances: 4, vars, ..Default::default() }).unwrap()
}

async fn instance(name: &str, vars: &[(&str, &str)], outputs: &std::sync::Arc<Outputs>) -> ShardInstance {
    let processor = Processor::load(&runtime(vars), &guest(name)).await.unwrap();
    let mut instance = processor.instantiate_with_outputs("shard", Box::new(Discard), Box::new(outputs.shard()), KeyedState::unavailable("no state in this bench"), None, None).await.unwrap();
    instance.initialize(&ShardInfo::new("bench", "shard")).await.unwrap();
    instance
}

/// The next sequence number: every instance's checkpoints only move forward.
static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// Runs `batches` batches of `size` through `instance`; the time the calls
/// took (the batches are built before the clock starts).
async fn run(instance: &mut ShardInstance, batches: usize, size: usize) -> Duration {
    let mut built: Vec<Batch> = (0..batches).map(|_| batch(size, NEXT.fetch_add(size, std::sync::atomic::Ordering::Relaxed))).collect();
    let started = Instant::now();
    for batch in &mut built {
        instance.process_records(batch).await.unwrap();
    }
    started.elapsed()
}

fn discarding(name: &str) -> std::sync::Arc<Outputs> {
    Outputs::discarding(&[OutputSpec { name: name.into(), target: TargetSpec::Stdout }])
}

async fn call() {
    const SIZE: usize = 10_000;
    const BATCHES: usize = 30;
    let mut forward = instance("forward", &[("quiet", "1")], &discarding("out")).await;
    let mut noop = instance("noop", &[], &discarding("out")).await;
    run(&mut forward, 3, SIZE).await;
    run(&mut noop, 3, SIZE).await;
    let (with, without) = (run(&mut forward, BATCHES, SIZE).await, run(&mut noop, BATCHES, SIZE).await);
    let records = (BATCHES * SIZE) as f64;
    let output_path = with.saturating_sub(without);
    println!(
        "call: forward to a null target {:.2} M records/s; noop (delivery alone) {:.2} M records/s; \
         the output path alone {:.2} M records/s ({:.0} ns a record)",
        records / with.as_secs_f64() / 1e6,
        records / without.as_secs_f64() / 1e6,
        records / output_path.as_secs_f64() / 1e6,
        output_path.as_nanos() as f64 / records
    );
}

async fn kinesis() {
    const BATCHES: usize = 10;
    let aws = kcl_testkit::clients().await;
    // One stream each, growing alike: the local server slows as a stream grows.
    let stream = TestStream::create(&aws.kinesis, &unique("bench-host"), 4).await;
    let native_stream = TestStream::create(&aws.kinesis, &unique("bench-native"), 4).await;
    let spec = OutputSpec { name: "out".into(), target: TargetSpec::Kinesis(stream.name.clone()) };
    let outputs = Outputs::connect(&[spec], &aws, 64 << 20, None).await.unwrap();
    let mut forward = instance("forward", &[("quiet", "1")], &outputs).await;
    let mut nothing = instance("forward", &[("quiet", "1"), ("target", "none")], &discarding("none")).await;
    // Native: the same records, 500 a call, one call after the other.
    let native = || async {
        let started = Instant::now();
        for _ in 0..BATCHES {
            let entries: Vec<PutRecordsRequestEntry> = (0..BATCH)
                .map(|i| {
                    let data = "x".repeat(RECORD_BYTES);
                    PutRecordsRequestEntry::builder().data(Blob::new(data)).partition_key(format!("k{}", i % 64)).build().unwrap()
                })
                .collect();
            let out = aws.kinesis.put_records().stream_name(&native_stream.name).set_records(Some(entries)).send().await.unwrap();
            assert_eq!(out.failed_record_count(), Some(0));
        }
        started.elapsed()
    };
    let mut rounds = Vec::new();
    for round in 0..4 {
        // Alternate which goes first.
        let (host, baseline) = if round % 2 == 0 {
            let host = run(&mut forward, BATCHES, BATCH).await;
            (host, native().await)
        } else {
            let baseline = native().await;
            (run(&mut forward, BATCHES, BATCH).await, baseline)
        };
        let without = run(&mut nothing, BATCHES, BATCH).await;
        rounds.push((host, baseline, without));
    }
    let records = (BATCHES * BATCH) as f64;
    for (host, baseline, without) in &rounds {
        println!(
            "kinesis: through the host {:.0} records/s, native PutRecords {:.0} records/s ({:.2}x); \
             flush per checkpoint {:.1} ms (batch call {:.1} ms with outputs, {:.2} ms without)",
            records / host.as_secs_f64(),
            records / baseline.as_secs_f64(),
            baseline.as_secs_f64() / host.as_secs_f64(),
            host.saturating_sub(*without).as_secs_f64() * 1e3 / BATCHES as f64,
            host.as_secs_f64() * 1e3 / BATCHES as f64,
            without.as_secs_f64() * 1e3 / BATCHES as f64,
        );
    }
}

/// [`stall`]'s rounds: every 250 ms, a record to each of the 3 steady shards.
const STALL_ROUNDS: usize = 40;
/// The round whose records follow the hog's.
const HOG_ROUND: usize = 8;

/// Whether some lease in `leases` is checkpointed at `sequence_number`.
fn table_holds(leases: &[kcl_host::lease::Lease], sequence_number: &str) -> bool {
    leases.iter().any(|lease| lease.checkpoint.as_column() == sequence_number)
}

/// Latencies in ms of the steady shards' records from round [`HOG_ROUND`]
/// on, with or without the hog on the first shard, the worker's output
/// buffer `buffer_mib` (see the module).
async fn stall(hog: bool, buffer_mib: &str) -> Vec<i64> {
    let aws = kcl_testkit::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("bench-stall"), 4).await;
    let output = TestStream::create(&aws.kinesis, &unique("bench-stall-out"), 1).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let (processor, cache, application) = (guest("forward").display().to_string(), kcl_testkit::test_cache_dir().display().to_string(), unique("bench-stall-app"));
    let target = format!("out=kinesis:{}", output.name);
    let args = ["run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", &cache, "--output", &target, "--output-buffer-mib", buffer_mib];
    let mut host = kcl_testkit::process::KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("4 shards", Duration::from_secs(120), |log| log.iter().filter(|l| l.contains("kcl_host::worker::shards: processing shard=")).count() >= 4).await;
    let mut after_hog = Vec::new();
    for round in 0..STALL_ROUNDS {
        if hog && round == HOG_ROUND {
            stream.put_to(&[(shards[0].as_str(), b"hog:16:5000".as_slice(), "hog")]).await;
        }
        let data = format!("r{round}");
        let entries: Vec<(&str, &[u8], &str)> = shards[1..].iter().map(|shard| (shard.as_str(), data.as_bytes(), "k")).collect();
        let sequence_numbers = stream.put_to(&entries).await;
        if round >= HOG_ROUND {
            after_hog.extend(sequence_numbers);
        }
        // A paced producer: the latency is measured at 4 records a second.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Outputs are written before the checkpoint that covers them: once each
    // steady shard's checkpoint is at its last record, the output holds them.
    let last: Vec<&String> = after_hog.iter().rev().take(3).collect();
    let table = DynamoStore::new(aws.dynamodb.clone(), &application);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let leases = table.list().await.unwrap_or_default();
        if last.iter().all(|seq| table_holds(&leases, seq)) {
            break;
        }
        assert!(Instant::now() < deadline, "the steady shards did not checkpoint their last records");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out: BTreeMap<String, i64> =
        output.read_all_arrivals().await.into_iter().filter_map(|(record, at): (StreamRecord, i64)| Some((record.data.split(' ').nth(1)?.to_owned(), at))).collect();
    host.interrupt().await;
    let arrived: BTreeMap<String, i64> = stream.read_all_arrivals().await.into_iter().map(|(record, at)| (record.sequence_number, at)).collect();
    let mut latencies: Vec<i64> = after_hog.iter().map(|seq| out[seq] - arrived[seq]).collect();
    latencies.sort_unstable();
    latencies
}

fn main() {
    let which: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wants = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        if wants("call") {
            call().await;
        }
        if wants("kinesis") || wants("flush") {
            kinesis().await;
        }
        if wants("stall") {
            // A buffer larger than the hog's sends: what is left is the target's own contention.
            for (hog, buffer_mib) in [(false, "4"), (true, "4"), (true, "64")] {
                let latencies = stall(hog, buffer_mib).await;
                let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
                println!(
                    "stall: --output-buffer-mib {buffer_mib}, {} the steady shards' latency over {} records: p50 {} ms, p95 {} ms, max {} ms",
                    if hog { "with a shard sending 16 MiB in a 5 s call," } else { "alone," },
                    latencies.len(),
                    at(0.5),
                    at(0.95),
                    at(1.0)
                );
            }
        }
    });
}
