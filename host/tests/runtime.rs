//! The component runtime against real guests: load errors, traps, limits,
//! the sandbox, and checkpoints.

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcl_host::runtime::ShutdownReason;
use kcl_host::records::Position;
use kcl_host::runtime::{CallError, CheckpointFuture, CheckpointSink, KeyedState, LoadError, NoOutputs, Processor, RuntimeConfig, SharedMemory, StateChanges};
use support::{batch, guest, load, runtime, shard, Logs};

#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<String>>>);

impl CheckpointSink for Recorded {
    fn checkpoint<'a>(&'a mut self, position: Position, _: &'a StateChanges) -> CheckpointFuture<'a> {
        self.0.lock().unwrap().push(position.to_string());
        Box::pin(async { Ok(()) })
    }
}

async fn load_bytes(bytes: &[u8]) -> Result<Processor, LoadError> {
    Processor::from_bytes(&runtime(RuntimeConfig::default()), Path::new("p.wasm"), bytes).await
}

fn message(result: Result<Processor, LoadError>) -> String {
    match result {
        Ok(_) => panic!("expected a load error"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_missing_file_is_named() {
    let err = Processor::load(&runtime(RuntimeConfig::default()), Path::new("/nowhere/p.wasm")).await;
    let msg = message(err);
    assert!(msg.contains("/nowhere/p.wasm") && msg.contains("check the path"), "{msg}");
}

#[tokio::test]
async fn a_file_that_is_not_wasm_is_refused() {
    let msg = message(load_bytes(b"#!/bin/sh\necho hi\n").await);
    assert!(msg.contains("p.wasm") && msg.contains("not a WebAssembly file"), "{msg}");
}

#[tokio::test]
async fn a_core_module_is_told_to_rebuild_for_wasip2() {
    let module = wat::parse_str("(module (func (export \"f\")))").unwrap();
    let msg = message(load_bytes(&module).await);
    assert!(msg.contains("core WebAssembly module") && msg.contains("wasm32-wasip2"), "{msg}");
}

#[tokio::test]
async fn a_truncated_component_is_invalid() {
    let bytes = std::fs::read(guest("noop")).unwrap();
    let msg = message(load_bytes(&bytes[..bytes.len() / 2]).await);
    assert!(msg.contains("not a valid WebAssembly component"), "{msg}");
}

#[tokio::test]
async fn a_component_without_the_export_lists_what_it_has() {
    let component = wat::parse_str(
        r#"(component
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func $f (canon lift (core func $i "f")))
             (export "run" (func $f)))"#,
    )
    .unwrap();
    let msg = message(load_bytes(&component).await);
    assert!(msg.contains("does not export `kcl:processor/record-processor@0.4.0` (nor the older") && msg.contains("record-processor@0.1.0`;"), "{msg}");
    assert!(msg.contains("`run`") && msg.contains("SDK"), "{msg}");
}

#[tokio::test]
async fn wrong_signatures_fail_at_load_not_on_the_first_shard() {
    // Every function takes no arguments: the names match, the types do not.
    let component = wat::parse_str(
        r#"(component
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func $f (canon lift (core func $i "f")))
             (instance $rp
               (export "initialize" (func $f))
               (export "process-records" (func $f))
               (export "shutdown" (func $f)))
             (export "kcl:processor/record-processor@0.2.0" (instance $rp)))"#,
    )
    .unwrap();
    let msg = message(load_bytes(&component).await);
    assert!(msg.contains("does not fit the kcl:processor@0.2.0 world"), "{msg}");
    assert!(msg.contains("has initialize(), process-records(), shutdown()"), "shows what it has: {msg}");
}

#[tokio::test]
async fn an_import_the_host_does_not_provide_is_named() {
    let component = wat::parse_str(
        r#"(component
             (import "wasi:http/outgoing-handler@0.2.0" (instance (export "handle" (func))))
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func $f (canon lift (core func $i "f")))
             (instance $rp
               (export "initialize" (func $f))
               (export "process-records" (func $f))
               (export "shutdown" (func $f)))
             (export "kcl:processor/record-processor@0.1.0" (instance $rp)))"#,
    )
    .unwrap();
    let msg = message(load_bytes(&component).await);
    assert!(msg.contains("does not fit") && msg.contains("wasi:http/outgoing-handler"), "{msg}");
}

#[tokio::test]
async fn a_trap_stops_only_its_own_instance() {
    let processor = load("faulty").await;
    let mut bad = processor.instantiate("shard-a", Box::new(Recorded::default()), None).await.unwrap();
    let mut good = processor.instantiate("shard-b", Box::new(Recorded::default()), None).await.unwrap();
    bad.initialize(&shard("shard-a")).await.unwrap();
    good.initialize(&shard("shard-b")).await.unwrap();

    let err = bad.process_records(&mut batch(1, &["ok", "panic"])).await.unwrap_err();
    assert!(matches!(&err, CallError::Trap(m) if m.contains("unreachable")), "{err:?}");
    assert!(!err.instance_survives());
    assert!(matches!(bad.process_records(&mut batch(3, &["ok"])).await, Err(CallError::Trap(_))));

    good.process_records(&mut batch(1, &["ok"])).await.unwrap();
    good.shutdown(ShutdownReason::ShardEnd).await.unwrap();
}

#[tokio::test]
async fn an_endless_loop_hits_the_deadline() {
    let config = RuntimeConfig { call_deadline: Duration::from_millis(200), ..Default::default() };
    let processor = Processor::load(&runtime(config), &guest("faulty")).await.unwrap();
    let mut instance = processor.instantiate("s", Box::new(Recorded::default()), None).await.unwrap();
    instance.initialize(&shard("s")).await.unwrap();
    let err = instance.process_records(&mut batch(1, &["spin"])).await.unwrap_err();
    assert_eq!(err, CallError::DeadlineExceeded(Duration::from_millis(200)));
}

/// Busy guests on every worker thread must not starve other tasks (lease
/// renewals, I/O): a guest yields to the async runtime at every epoch tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_guests_leave_the_async_runtime_free() {
    let config = RuntimeConfig { call_deadline: Duration::from_secs(2), ..Default::default() };
    let processor = Processor::load(&runtime(config), &guest("faulty")).await.unwrap();
    let mut spinners = tokio::task::JoinSet::new();
    for i in 0..4 {
        let processor = processor.clone();
        spinners.spawn(async move {
            let id = format!("s{i}");
            let mut instance = processor.instantiate(&id, Box::new(Recorded::default()), None).await.unwrap();
            instance.initialize(&shard(&id)).await.unwrap();
            instance.process_records(&mut batch(1, &["spin"])).await.unwrap_err()
        });
    }
    // A renewal-like task ticking every 50 ms while all four guests spin.
    let ticker = tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(50));
        let mut last = tokio::time::Instant::now();
        let mut longest = Duration::ZERO;
        for _ in 0..20 {
            interval.tick().await;
            let now = tokio::time::Instant::now();
            longest = longest.max(now - last);
            last = now;
        }
        longest
    });
    let longest = ticker.await.unwrap();
    while let Some(err) = spinners.join_next().await {
        assert_eq!(err.unwrap(), CallError::DeadlineExceeded(Duration::from_secs(2)));
    }
    // Before guests yielded, the two worker threads were held for the whole 2 s deadline.
    assert!(longest < Duration::from_millis(1000), "a 50 ms ticker waited {longest:?} while guests spun");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_call_stops_long_before_its_deadline() {
    let processor = load("faulty").await; // 30 s deadline
    let mut instance = processor.instantiate("s", Box::new(Recorded::default()), None).await.unwrap();
    instance.initialize(&shard("s")).await.unwrap();
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = gone.clone();
    instance.withdraw_when(Arc::new(move || flag.load(std::sync::atomic::Ordering::SeqCst)));
    let call = tokio::spawn(async move { instance.process_records(&mut batch(1, &["spin"])).await });
    tokio::time::sleep(Duration::from_millis(100)).await; // the guest spins meanwhile
    gone.store(true, std::sync::atomic::Ordering::SeqCst);
    let result = tokio::time::timeout(Duration::from_secs(10), call).await.expect("stopped, not run to its 30 s deadline");
    assert_eq!(result.unwrap(), Err(CallError::Withdrawn));
}

#[tokio::test]
async fn unbounded_allocation_hits_the_memory_cap() {
    let config = RuntimeConfig { memory_limit: 32 << 20, ..Default::default() };
    let processor = Processor::load(&runtime(config), &guest("faulty")).await.unwrap();
    let mut instance = processor.instantiate("s", Box::new(Recorded::default()), None).await.unwrap();
    instance.initialize(&shard("s")).await.unwrap();
    let err = instance.process_records(&mut batch(1, &["hog"])).await.unwrap_err();
    assert_eq!(err, CallError::MemoryLimit(32 << 20));
}

#[tokio::test]
async fn instances_sharing_memory_are_held_to_one_limit_together_and_get_it_back_when_one_is_dropped() {
    let limit = 48 << 20;
    let processor = Processor::load(&runtime(RuntimeConfig { memory_limit: limit, ..Default::default() }), &guest("faulty")).await.unwrap();
    let shared = SharedMemory::new(limit);
    let start = || async {
        let state = KeyedState::unavailable("no state here");
        let mut instance = processor.instantiate_with_outputs("s", Box::new(Recorded::default()), Box::new(NoOutputs), state, None, Some(shared.clone())).await.unwrap();
        instance.initialize(&shard("s")).await.unwrap();
        instance
    };
    let mut first = start().await;
    first.process_records(&mut batch(1, &["hold:30"])).await.unwrap();
    let mut second = start().await;
    assert_eq!(second.process_records(&mut batch(1, &["hold:30"])).await, Err(CallError::MemoryLimit(limit)), "30 MiB more do not fit beside the first's");
    drop((first, second));
    assert_eq!(shared.used(), 0, "dropped instances give their memory back");
    let mut third = start().await;
    third.process_records(&mut batch(1, &["hold:30"])).await.unwrap();
    assert!((30 << 20..=limit).contains(&shared.used()), "{} bytes", shared.used());
}

#[tokio::test]
async fn guest_errors_are_typed_and_leave_the_instance_usable() {
    let processor = load("faulty").await;
    let mut instance = processor.instantiate("s", Box::new(Recorded::default()), None).await.unwrap();
    instance.initialize(&shard("s")).await.unwrap();
    let mut again = batch(1, &["retry"]);
    let err = instance.process_records(&mut again).await.unwrap_err();
    assert!(matches!(&err, CallError::Retryable(m) if m.contains("try 1 again")), "{err:?}");
    assert!(err.instance_survives());
    instance.process_records(&mut again).await.unwrap();
    let err = instance.process_records(&mut batch(2, &["fatal"])).await.unwrap_err();
    assert_eq!(err, CallError::Fatal("asked to fail".into()));
}

#[tokio::test]
async fn the_sandbox_has_no_environment_and_no_files() {
    let (logs, _guard) = Logs::capture();
    let processor = load("faulty").await;
    let mut instance = processor.instantiate("shard-7", Box::new(Recorded::default()), None).await.unwrap();
    instance.initialize(&shard("shard-7")).await.unwrap();
    instance.process_records(&mut batch(1, &["env", "file"])).await.unwrap();
    let text = logs.text();
    assert!(text.contains("env vars: 0"), "{text}");
    assert!(text.contains("read /etc/hostname: Err("), "{text}");
    assert!(text.contains("shard=\"shard-7\""), "guest lines carry the shard: {text}");
}

#[tokio::test]
async fn checkpoints_must_name_delivered_records() {
    let (logs, _guard) = Logs::capture();
    let sink = Recorded::default();
    let processor = load("faulty").await;
    let mut instance = processor.instantiate("s", Box::new(sink.clone()), None).await.unwrap();
    instance.initialize(&shard("s")).await.unwrap();
    instance.process_records(&mut batch(10, &["a", "checkpoint:10", "checkpoint:99", "checkpoint:x"])).await.unwrap();
    let text = logs.text();
    assert!(text.contains("checkpoint 10: Ok(())"), "{text}");
    assert!(text.contains("checkpoint 99: Err(InvalidSequenceNumber(\"99 has not been delivered yet"), "{text}");
    assert!(text.contains("checkpoint x: Err(InvalidSequenceNumber(\"`x` is not a sequence number"), "{text}");
    assert_eq!(*sink.0.lock().unwrap(), vec!["10"]);

    instance.shutdown(ShutdownReason::LeaseLost).await.unwrap();
}

#[tokio::test]
async fn stdout_reaches_the_log_tagged_with_the_shard() {
    let (logs, _guard) = Logs::capture();
    let processor = load("faulty").await;
    let mut instance = processor.instantiate("shard-9", Box::new(Recorded::default()), None).await.unwrap();
    instance.initialize(&shard("shard-9")).await.unwrap();
    // A panic message goes to stderr before the trap.
    let _ = instance.process_records(&mut batch(1, &["panic"])).await;
    let text = logs.text();
    let line = text.lines().find(|l| l.contains("asked to panic")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("WARN") && line.contains("shard=\"shard-9\""), "{line}");
}
