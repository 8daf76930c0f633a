//! The shard loop against the in-memory lease store, a scripted reader and
//! a real component (the `faulty` test guest): retries, restarts, lease
//! loss, shard end and swap, judged by the lease row, the reader's opens
//! and the calls the loop reports.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::*;
use crate::fetch::{self, Prefetch, ShardReader, StartingPosition};
use crate::records::kpl::HashRange;
use crate::lease::coordinator::Coordinator;
use crate::lease::memory::MemoryStore;
use crate::lease::rules::TakeSettings;
use crate::lease::Lease;
use crate::metrics::Metrics;
use crate::records::Record;
use crate::output::{OutputSpec, TargetSpec};
use crate::runtime::{Runtime, RuntimeConfig};

/// A shard of `(sequence number, data)` records, served from wherever a
/// reader is opened; every open is noted.
struct ScriptedShard {
    records: Vec<(u64, &'static str)>,
    closed: bool,
    opens: watch::Sender<Vec<StartingPosition>>,
}

/// One batch, then nothing (or the shard's end).
struct Script(Option<Fetched>);

impl ShardReader for Script {
    async fn next(&mut self) -> Result<Fetched, AwsError> {
        match self.0.take() {
            Some(fetched) => Ok(fetched),
            None => std::future::pending().await,
        }
    }
}

impl OpenReader for ScriptedShard {
    fn open(&self, _: &str, _: &str, start: StartingPosition, _: Option<HashRange>) -> Prefetch {
        let after = match &start {
            StartingPosition::Checkpoint(position) => position.sequence_number().parse().unwrap(),
            _ => 0,
        };
        self.opens.send_modify(|opens| opens.push(start));
        let sequence_numbers: Vec<(String, &str)> =
            self.records.iter().filter(|(seq, _)| *seq > after).map(|(seq, data)| (seq.to_string(), *data)).collect();
        let batch: Batch = sequence_numbers
            .iter()
            .map(|(seq, data)| Record {
                data: data.as_bytes(),
                partition_key: "k",
                sequence_number: seq,
                sub_sequence_number: None,
                arrival_timestamp_ms: 0,
                explicit_hash_key: None,
            })
            .collect();
        let shard_end = self.closed.then(BTreeSet::new);
        fetch::prefetch(Script(Some(Fetched { batch, shard_end, reads: crate::metrics::Reads { calls: 1, ..Default::default() }, read_at_ms: crate::clock::unix_ms() })))
    }
}

/// A shard loop over `records`, its lease taken from the in-memory store.
struct Fixture {
    shard_loop: ShardLoop<MemoryStore>,
    shard: Arc<ScriptedShard>,
    store: Arc<MemoryStore>,
    coordinator: Coordinator<MemoryStore>,
    stop: watch::Sender<bool>,
    processor: watch::Sender<Processor>,
    reports: mpsc::UnboundedReceiver<CallReport>,
    delivered: Arc<AtomicU64>,
}

async fn load(guest: &str) -> Processor {
    let runtime = Runtime::new(RuntimeConfig { cache_dir: Some(kcl_testkit::test_cache_dir()), max_instances: 8, ..Default::default() }).unwrap();
    Processor::load(&runtime, &kcl_testkit::guest(guest)).await.unwrap()
}

async fn fixture(records: Vec<(u64, &'static str)>, closed: bool) -> Fixture {
    let no_policy = FailureSettings::default();
    let dead_letters = DeadLetters::printed(&no_policy);
    fixture_with(records, closed, Policy { guest: "faulty", outputs: Outputs::printed(&[], 1 << 20, None), failure: no_policy, dead_letters }).await
}

/// The guest a fixture runs, and its outputs and failure policy.
struct Policy {
    guest: &'static str,
    outputs: Arc<Outputs>,
    failure: FailureSettings,
    dead_letters: Arc<DeadLetters>,
}

async fn fixture_with(records: Vec<(u64, &'static str)>, closed: bool, policy: Policy) -> Fixture {
    let Policy { guest, outputs, failure, dead_letters } = policy;
    let store = Arc::new(MemoryStore::default());
    store.create(&Lease::new("shard-0", Checkpoint::TrimHorizon, BTreeSet::new())).await.unwrap();
    let mut coordinator = Coordinator::new(store.clone(), "worker", TakeSettings::default());
    let held = coordinator.take_pass().await.unwrap().taken.pop().expect("the lease is free");
    let shard = Arc::new(ScriptedShard { records, closed, opens: watch::channel(Vec::new()).0 });
    let (stop, stop_rx) = watch::channel(false);
    let (processor, processor_rx) = watch::channel(load(guest).await);
    let (reports_tx, reports) = mpsc::unbounded_channel();
    let delivered = Arc::new(AtomicU64::new(0));
    let shard_loop = ShardLoop {
        processor: processor_rx,
        reader: shard.clone(),
        stream: "stream".into(),
        initial_timestamp_ms: None,
        held,
        stop: stop_rx,
        delivered: delivered.clone(),
        metrics: Arc::new(Metrics::new("app", "worker")).shard("stream", &"shard-0".into()),
        reports: reports_tx,
        redelivery: Budget::new(1 << 20),
        outputs,
        state: Arc::new(unreachable_state_table()),
        failure: Arc::new(failure),
        dead_letters,
        retrying: Arc::new(crate::failure::retrying::Retrying::board()),
        parallelism: 1,
        call_records: 10_000,
        in_flight: Arc::new(crate::worker::in_flight::InFlight::board()),
        windows: super::Windows::new(None, "shard-0"),
        memory: None,
    };
    Fixture { shard_loop, shard, store, coordinator, stop, processor, reports, delivered }
}

/// A state table no test guest uses (the client has no endpoint to reach).
fn unreachable_state_table() -> crate::state::StateTable {
    let config = aws_sdk_dynamodb::Config::builder().behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest()).build();
    crate::state::StateTable::new(aws_sdk_dynamodb::Client::from_conf(config), "app")
}

fn checkpoint_of(store: &MemoryStore) -> Checkpoint {
    store.get("shard-0").unwrap().checkpoint
}

#[tokio::test]
async fn a_retried_batch_goes_to_the_same_instance_and_a_closed_shard_ends_with_shard_end() {
    let f = fixture(vec![(1, "a"), (2, "retry"), (3, "checkpoint:3")], true).await;
    let outcome = f.shard_loop.run().await;
    assert_eq!(outcome, Outcome::ShardEnd { children: BTreeSet::new() });
    assert_eq!(checkpoint_of(&f.store), Checkpoint::ShardEnd);
    assert_eq!(f.delivered.load(Ordering::Relaxed), 3, "the batch counts once, after its retry");
    assert_eq!(f.shard.opens.borrow().len(), 1, "a retry reads nothing again");
}

#[tokio::test]
async fn a_trap_restarts_the_instance_from_the_last_checkpoint_with_the_records_since_it_from_memory() {
    let mut f = fixture(vec![(1, "checkpoint:1"), (2, "panic")], false).await;
    let running = tokio::spawn(f.shard_loop.run());
    // The batch traps after checkpointing record 1; the fresh instance gets
    // record 2 again, from memory, and traps on it again.
    for _ in 0..2 {
        assert!(!f.reports.recv().await.unwrap().ok, "the trap counts against the version");
    }
    f.stop.send_replace(true);
    assert_eq!(running.await.unwrap(), Outcome::Stopped);
    assert_eq!(*f.shard.opens.borrow(), [StartingPosition::TrimHorizon], "the shard was read once");
    assert_eq!(checkpoint_of(&f.store), Checkpoint::At(Position::new("1", 0).unwrap()));
}

#[tokio::test]
async fn a_lost_lease_ends_the_loop_and_refuses_its_checkpoints() {
    let mut f = fixture(vec![(1, "a")], false).await;
    let running = tokio::spawn(f.shard_loop.run());
    assert!(f.reports.recv().await.unwrap().ok, "the first batch is processed");
    f.coordinator.evict("shard-0").await.unwrap();
    assert_eq!(running.await.unwrap(), Outcome::LeaseLost);
    assert_eq!(checkpoint_of(&f.store), Checkpoint::TrimHorizon, "nothing written after the loss");
}

#[tokio::test]
async fn a_swap_delivers_the_records_since_the_checkpoint_to_the_new_version() {
    let mut f = fixture(vec![(1, "checkpoint:1"), (2, "b")], false).await;
    let running = tokio::spawn(f.shard_loop.run());
    let first = f.reports.recv().await.unwrap();
    let tagged = load("tagged").await;
    assert_ne!(first.processor, tagged.hash());
    f.processor.send_replace(tagged.clone());
    let next = f.reports.recv().await.unwrap();
    assert_eq!((next.processor.as_str(), next.ok), (tagged.hash(), true));
    assert_eq!(f.delivered.load(Ordering::Relaxed), 3, "record 2, after the checkpoint, went to both versions");
    assert_eq!(f.shard.opens.borrow().len(), 1, "the swap reads nothing again");
    f.stop.send_replace(true);
    assert_eq!(running.await.unwrap(), Outcome::Stopped);
}

    #[test]
    fn a_restart_without_a_checkpoint_rereads_what_the_failed_attempt_was_given() {
        let first = Some("4950");
        for (checkpoint, timestamp) in [(Checkpoint::Latest, None), (Checkpoint::AtTimestamp, Some(1_700_000_000_000))] {
            assert_eq!(
                starting_position(&checkpoint, first, timestamp),
                Start::Read(StartingPosition::At("4950".into()), None),
                "{checkpoint:?}"
            );
        }
        assert_eq!(starting_position(&Checkpoint::Latest, None, None), Start::Read(StartingPosition::Latest, None));
        assert_eq!(starting_position(&Checkpoint::TrimHorizon, first, None), Start::Read(StartingPosition::TrimHorizon, None));
        let done = Position::new("4960", 0).unwrap();
        assert_eq!(
            starting_position(&Checkpoint::At(done.clone()), first, None),
            Start::Read(StartingPosition::Checkpoint(done.clone()), Some(done)),
            "a checkpoint wins"
        );
        assert_eq!(starting_position(&Checkpoint::AtTimestamp, None, None), Start::Refused);
    }

#[tokio::test]
async fn bisect_finds_a_trapping_record_and_the_shard_moves_past_it_after_its_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let (out, dlq) = (dir.path().join("out.jsonl"), dir.path().join("dlq.jsonl"));
    let failure = FailureSettings {
        max_retry_attempts: Some(1),
        bisect_on_error: true,
        on_failure: Some(TargetSpec::File(dlq.clone())),
        retry_backoff: std::time::Duration::from_millis(10),
        ..FailureSettings::default()
    };
    let dead_letters = DeadLetters::printed(&failure);
    let outputs = Outputs::printed(&[OutputSpec { name: "out".into(), target: TargetSpec::File(out.clone()) }], 1 << 20, None);
    let records = vec![(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "trap"), (6, "f"), (7, "g"), (8, "h")];
    let f = fixture_with(records, true, Policy { guest: "forward", outputs, failure, dead_letters: dead_letters.clone() }).await;
    assert_eq!(f.shard_loop.run().await, Outcome::ShardEnd { children: BTreeSet::new() });
    assert_eq!(checkpoint_of(&f.store), Checkpoint::ShardEnd);

    let lines = |path: &std::path::Path| -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines().map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["data"].as_str().unwrap().to_owned()).collect()
    };
    let forwarded = lines(&out);
    assert_eq!(forwarded, ["a", "b", "c", "d", "f", "g", "h"].map(|d| d.to_owned()).iter().zip([1, 2, 3, 4, 6, 7, 8]).map(|(d, n)| format!("shard-0 {n} {d}")).collect::<Vec<_>>(), "every other record once, in order");
    let dead = lines(&dlq);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead_letters.written(), 1);
    let envelope: serde_json::Value = serde_json::from_str(&dead[0]).unwrap();
    assert_eq!(envelope["sequence_number"], "5");
    assert_eq!(envelope["data"], "dHJhcA==", "the record's own data, base64");
    assert_eq!(envelope["condition"], "RetryAttemptsExhausted");
    assert_eq!(envelope["attempts"], 2, "the record alone: one call and one retry");
    assert_eq!(envelope["error"], "processor trapped: wasm trap: wasm `unreachable` instruction executed", "the cause, without the backtrace");
}
