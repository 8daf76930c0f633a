//! Host→guest throughput, instantiation and idle memory of the component
//! runtime, with the realistic processor's logic run natively as the baseline.
//!
//! Run with `bash scripts/build-guests.sh && cargo bench -p kcl-host --bench runtime`;
//! figures go in docs/BENCHMARKS.md.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use kcl_example_json_aggregate::Totals;
use kcl_host::records::{Batch, Position, Record};
use kcl_host::runtime::ShardInfo;
use kcl_host::runtime::{CheckpointFuture, CheckpointSink, Processor, Runtime, RuntimeConfig, ShardInstance, StateChanges};
use kcl_testkit::guest;

const BATCH: usize = 500;
const RECORD_BYTES: usize = 1024;
const IDLE_INSTANCES: usize = 1000;

struct Discard;

impl CheckpointSink for Discard {
    fn checkpoint<'a>(&'a mut self, _: Position, _: &'a StateChanges) -> CheckpointFuture<'a> {
        Box::pin(async { Ok(()) })
    }
}

/// 1 KiB JSON purchase events, padded with a note.
fn batch() -> Batch {
    let mut batch = Batch::default();
    for i in 0..BATCH {
        let mut data = format!(r#"{{"user":"u{}","kind":"purchase","amount":{}.5,"note":""#, i % 50, i % 17);
        data.push_str(&"x".repeat(RECORD_BYTES - data.len() - 2));
        data.push_str("\"}");
        assert_eq!(data.len(), RECORD_BYTES);
        batch.push(Record {
            data: data.as_bytes(),
            partition_key: &format!("u{}", i % 50),
            sequence_number: &format!("49{i:054}"),
            sub_sequence_number: None,
            arrival_timestamp_ms: 1_780_000_000_000,
            explicit_hash_key: None,
        });
    }
    batch
}

fn shard(id: &str) -> ShardInfo {
    ShardInfo::new("bench", id)
}

/// An initialized instance; the 0.1 guest does nothing on a shard named `noop`.
async fn instance(processor: &Processor, shard_id: &str) -> ShardInstance {
    let mut instance = processor.instantiate(shard_id, Box::new(Discard), None).await.unwrap();
    instance.initialize(&shard(shard_id)).await.unwrap();
    instance
}

const SHARD: &str = "shardId-000000000000";

/// Private pages of this process (clean and dirty), from smaps_rollup.
fn private_bytes() -> usize {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    let kib = |field: &str| -> usize {
        rollup.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
    };
    (kib("Private_Clean:") + kib("Private_Dirty:")) * 1024
}

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // The tests' compile cache: the Python and JavaScript components are the slow ones to compile.
    let config = RuntimeConfig { cache_dir: Some(kcl_testkit::test_cache_dir()), max_instances: IDLE_INSTANCES as u32 + 8, ..Default::default() };
    let runtime = Runtime::new(config).unwrap();
    let noop = rt.block_on(Processor::load(&runtime, &guest("noop"))).unwrap();
    let aggregate = rt.block_on(Processor::load(&runtime, &guest("json-aggregate"))).unwrap();
    let go_aggregate = rt.block_on(Processor::load(&runtime, &guest("go-json-aggregate"))).unwrap();
    let py_aggregate = rt.block_on(Processor::load(&runtime, &guest("py-json-aggregate"))).unwrap();
    let js_aggregate = rt.block_on(Processor::load(&runtime, &guest("js-json-aggregate"))).unwrap();
    // The same work through the 0.1 contract (a list of records), side by side.
    let legacy = rt.block_on(Processor::load(&runtime, &guest("legacy-v0.1"))).unwrap();
    println!("contract: go-json-aggregate {}, legacy-v0.1 {}", go_aggregate.contract_version(), legacy.contract_version());
    for name in ["noop", "json-aggregate", "go-json-aggregate", "py-json-aggregate", "js-json-aggregate"] {
        println!("component-size/{name}: {} KiB", std::fs::metadata(guest(name)).unwrap().len() / 1024);
    }
    let mut batch = batch();

    // Idle memory: resident and private growth over many initialized
    // instances (fewer Go, Python and JavaScript ones: each carries its runtime's heap;
    // pages shared copy-on-write from the compiled image are resident but
    // not private).
    let idle = [
        ("noop", &noop, IDLE_INSTANCES),
        ("json-aggregate", &aggregate, IDLE_INSTANCES),
        ("go-json-aggregate", &go_aggregate, 100),
        ("py-json-aggregate", &py_aggregate, 100),
        ("js-json-aggregate", &js_aggregate, 100),
    ];
    for (name, processor, count) in idle {
        let (before, private_before) = (resident_bytes(), private_bytes());
        let started = std::time::Instant::now();
        let instances: Vec<_> = rt.block_on(async {
            let mut all = Vec::new();
            for _ in 0..count {
                all.push(instance(processor, SHARD).await);
            }
            all
        });
        let took = started.elapsed() / count as u32;
        let per_instance = (resident_bytes() - before) / count;
        let private = (private_bytes() - private_before) / count;
        println!(
            "idle-memory/{name}: {} KiB resident, {} KiB private per instance ({count} instances, {took:?} each to instantiate and initialize)",
            per_instance / 1024,
            private / 1024
        );
        drop(instances);
    }

    let mut c = Criterion::default().configure_from_args().measurement_time(Duration::from_secs(5));
    let mut group = c.benchmark_group("process-records");
    group.throughput(Throughput::Elements(BATCH as u64));
    let runs = [
        ("noop", &noop, SHARD),
        ("noop-v0.1", &legacy, "noop"),
        ("json-aggregate", &aggregate, SHARD),
        ("json-aggregate-v0.1", &legacy, SHARD),
        ("go-json-aggregate", &go_aggregate, SHARD),
        ("py-json-aggregate", &py_aggregate, SHARD),
        ("js-json-aggregate", &js_aggregate, SHARD),
    ];
    for (name, processor, shard_id) in runs {
        let mut instance = rt.block_on(instance(processor, shard_id));
        group.bench_function(BenchmarkId::new("wasm", name), |b| {
            b.iter(|| rt.block_on(instance.process_records(&mut batch)).unwrap())
        });
    }
    group.bench_function(BenchmarkId::new("native", "json-aggregate"), |b| {
        let mut totals = Totals::default();
        b.iter(|| {
            for record in batch.iter() {
                totals.add(record.data);
            }
        })
    });
    group.finish();

    // Each instance is dropped inside the iteration: its pooling slot (and
    // fiber) must be free again for the next.
    for (name, processor) in [("noop", &noop), ("go-json-aggregate", &go_aggregate), ("py-json-aggregate", &py_aggregate), ("js-json-aggregate", &js_aggregate)] {
        c.bench_function(&format!("instantiate-and-drop/{name}"), |b| {
            b.iter(|| drop(rt.block_on(processor.instantiate("shardId-000000000000", Box::new(Discard), None)).unwrap()))
        });
    }
    c.final_summary();
}
