//! Hot swap by each trigger under load, re-delivery from memory, the
//! canary and its rollback, and the fleet's deploy row.

use super::*;
use super::outputs::checkpoints;

/// Records processed by v2.
fn by_v2(log: &[String]) -> Vec<Delivered> {
    delivered(log).into_iter().filter(|d| d.processor.ends_with(V2)).collect()
}

/// A component that exports the processor interface by name with the wrong
/// functions: what a build against another WIT gives.
fn wrong_world() -> Vec<u8> {
    wat::parse_str(
        r#"(component
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func $f (canon lift (core func $i "f")))
             (instance $processor (export "initialize" (func $f)))
             (export "kcl:processor/record-processor@0.2.0" (instance $processor)))"#,
    )
    .unwrap()
}

/// The four ways to ask a running worker for a new version.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Trigger {
    /// SIGHUP: the same path, read again.
    Sighup,
    /// `--watch`: the path is a symlink, pointed at a new file (as a Kubernetes ConfigMap update does).
    Watch,
    /// `POST /swap` on the admin listener: the file's bytes and its path in turn.
    Post,
    /// `kcl-host deploy`, which the worker follows from the control table.
    Deploy,
}

/// One worker on an 8-shard stream under a steady producer, running v1 (the
/// counter) from `dir/processor.wasm`.
struct SwapRig {
    aws: AwsClients,
    application: String,
    dir: tempfile::TempDir,
    admin: String,
    host: KclHost,
    producer: kcl_testkit::producer::Producer,
    trigger: Trigger,
    shards: Vec<String>,
    /// Offers posted so far (`Trigger::Post`).
    posts: usize,
}

impl SwapRig {
    async fn start(trigger: Trigger) -> Self {
        let aws = clients().await;
        let stream = TestStream::create(&aws.kinesis, &unique("swap"), 8).await;
        let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(kcl_testkit::guest("counter"), dir.path().join("v1.wasm")).unwrap();
        std::os::unix::fs::symlink("v1.wasm", dir.path().join("processor.wasm")).unwrap();
        let application = unique("swap-app");
        let admin = admin_address();
        let (path, cache) = (dir.path().join("processor.wasm").display().to_string(), test_cache_dir().display().to_string());
        let mut args = vec![
            "run", &path, "--stream", &stream.name, "--application", &application, "--worker-id", "worker-1",
            "--idle-time-between-reads", "200ms", "--cache-dir", &cache,
        ];
        match trigger {
            Trigger::Watch => args.push("--watch"),
            Trigger::Post => args.extend(["--admin-listen", admin.as_str()]),
            Trigger::Sighup | Trigger::Deploy => {}
        }
        let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
        let producer = kcl_testkit::producer::Producer::start(&stream, "p", Duration::from_millis(100)).await;
        host.wait_for("v1 on every shard", LIMIT, |log| {
            let on: BTreeSet<String> = delivered(log).into_iter().filter(|d| d.processor.ends_with(V1)).map(|d| d.shard).collect();
            on.len() == shards.len()
        })
        .await;
        Self { aws, application, dir, admin, host, producer, trigger, shards, posts: 0 }
    }

    /// Offers `bytes`, saved as `dir/<name>`, through the rig's trigger:
    /// `Err` with the refusal when the worker (or `deploy`) refuses it.
    async fn offer(&mut self, name: &str, bytes: &[u8]) -> Result<(), String> {
        const SIGHUP: i32 = 1;
        let file = self.dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let path = self.dir.path().join("processor.wasm");
        match self.trigger {
            Trigger::Sighup => {
                let answers = count_lines(&self.host.log().await, "SIGHUP: ");
                std::fs::rename(&file, &path).unwrap();
                self.host.signal(SIGHUP);
                self.answer("SIGHUP: ", answers).await
            }
            Trigger::Watch => {
                let answers = count_lines(&self.host.log().await, "--watch: ");
                let next = self.dir.path().join("processor.wasm.next");
                std::os::unix::fs::symlink(name, &next).unwrap();
                std::fs::rename(&next, &path).unwrap();
                self.answer("--watch: ", answers).await
            }
            Trigger::Post => {
                self.posts += 1;
                let (status, body) = match self.posts % 2 {
                    1 => http(&self.admin, "POST", "/swap", "application/wasm", bytes).await,
                    _ => http(&self.admin, "POST", "/swap", "text/plain", file.display().to_string().as_bytes()).await,
                };
                if status.contains(" 200 ") { Ok(()) } else { Err(format!("{status}: {body}")) }
            }
            Trigger::Deploy => {
                let (code, text) = run_to_exit(&["deploy", &file.display().to_string(), "--application", &self.application], &[]).await;
                if code == 0 { Ok(()) } else { Err(text) }
            }
        }
    }

    /// The worker's answer for `trigger` after the `before` it gave already:
    /// a swap, or its refusal.
    async fn answer(&mut self, trigger: &str, before: usize) -> Result<(), String> {
        self.host.wait_for("the worker's answer", LIMIT, |log| count_lines(log, trigger) > before).await;
        let answer = self.host.log().await.into_iter().filter(|l| l.contains(trigger)).nth(before).unwrap();
        if answer.contains("not swapping") { Err(answer) } else { Ok(()) }
    }
}

/// Every acceptance check of a swap by `trigger`: two bad files refused with
/// v1 running on; v2 on every shard at a batch boundary, under a steady
/// producer; every record processed once; no lease changed hands.
async fn swap_under_load(trigger: Trigger) {
    let mut rig = SwapRig::start(trigger).await;
    let refused = rig.offer("not-wasm.wasm", b"a text file").await.expect_err("not wasm is refused");
    assert!(refused.contains("is not a WebAssembly file"), "{trigger:?}: {refused}");
    let refused = rig.offer("wrong-world.wasm", &wrong_world()).await.expect_err("the wrong world is refused");
    assert!(refused.contains("does not fit the kcl:processor@0.2.0 world") && refused.contains("process-records"), "{trigger:?}: {refused}");

    let v2 = std::fs::read(kcl_testkit::guest("tagged")).unwrap();
    rig.offer("v2.wasm", &v2).await.unwrap_or_else(|e| panic!("{trigger:?}: v2 refused: {e}"));
    let shards = rig.shards.clone();
    rig.host.wait_for("every shard swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= shards.len()).await;
    rig.host
        .wait_for("v2's batches on every shard", LIMIT, |log| {
            let v2 = by_v2(log);
            shards.iter().all(|s| v2.iter().filter(|d| &d.shard == s).count() >= 3)
        })
        .await;
    let produced = rig.producer.stop().await;
    rig.host
        .wait_for("every record produced", LIMIT, |log| {
            let seen: BTreeSet<String> = delivered(log).into_iter().map(|d| d.data).collect();
            produced.iter().all(|(_, data)| seen.contains(data))
        })
        .await;
    let table = leases(&rig.aws.dynamodb, &rig.application).await;
    let (status, log) = rig.host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let all = log.join("\n");

    // Every record once, on its shard. The counter checkpoints in
    // shutdown(requested), which the swap calls: none comes twice.
    let delivered = delivered(&log);
    let counts = delivery_counts(&delivered);
    for (shard, data) in &produced {
        match counts.get(data.as_str()) {
            None => panic!("{trigger:?}: {data} lost\n{all}"),
            Some((n, d)) => assert!(*n == 1 && &d.shard == shard, "{trigger:?}: {data} delivered {n} times, on {}", d.shard),
        }
    }
    assert_eq!(delivered.len(), produced.len(), "{trigger:?}: nothing but what was produced");
    let swaps: Vec<&String> = log.iter().filter(|l| l.contains("swapped the processor")).collect();
    assert_eq!(swaps.len(), shards.len(), "{trigger:?}: one swap per shard:\n{all}");
    assert!(swaps.iter().all(|l| l.contains("; 0 records since the last checkpoint delivered again")), "{trigger:?}: {swaps:#?}");

    // Each shard: v1 up to its swap, v2 after it.
    for shard in &shards {
        let at = log.iter().position(|l| l.contains("swapped the processor") && l.contains(&format!("shard={shard} "))).unwrap();
        for (i, line) in log.iter().enumerate() {
            let Some(d) = kcl_testkit::process::parse_delivered(line).filter(|d| &d.shard == shard) else { continue };
            let want = if i < at { V1 } else { V2 };
            assert!(d.processor.ends_with(want), "{trigger:?}: {} on {shard} by {}, expected {want}", d.data, d.processor);
        }
    }
    assert!(table.iter().all(|l| l.owner.as_deref() == Some("worker-1")), "{trigger:?}: no lease changed owner: {table:#?}");
    assert_eq!(count_lines(&log, "processing shard="), shards.len(), "{trigger:?}: the leases were never released");
    let summary = log.iter().find(|l| l.contains("stopped after")).unwrap();
    let (_, versions) = summary.rsplit_once("; processor ").unwrap();
    assert!(versions.contains(V1) && versions.contains(" -> ") && versions.ends_with(V2), "the exit line names both: {summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_eight_shards_under_load_and_refuses_bad_files() {
    swap_under_load(Trigger::Sighup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_swaps_eight_shards_under_load_when_the_symlink_moves() {
    swap_under_load(Trigger::Watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_swap_swaps_eight_shards_under_load_and_refuses_bad_files() {
    swap_under_load(Trigger::Post).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_swaps_eight_shards_under_load_and_refuses_bad_files() {
    swap_under_load(Trigger::Deploy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_delivers_what_came_after_the_last_checkpoint_again_from_memory() {
    swap_after_records_past_the_checkpoint("256", "; 5 records since the last checkpoint delivered again").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_over_the_buffer_restarts_the_shard_from_its_checkpoint_and_loses_nothing() {
    swap_after_records_past_the_checkpoint("0", "did not fit --swap-buffer-mib, so the shard restarts from it").await;
}

/// Five records on each of two shards processed by a version that never
/// checkpoints, then a swap with `--swap-buffer-mib buffer`: each shard's
/// log says `outcome`, and v2 is given those five again, in order, then
/// what came after — from memory, or read again from Kinesis.
async fn swap_after_records_past_the_checkpoint(buffer: &str, outcome: &str) {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("redeliver"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    for shard in &shards {
        stream.put(shard, &payloads(&format!("before-{shard}"), 5)).await;
    }
    // v1 is the faulty guest, which never checkpoints: all it was given
    // comes after the last checkpoint (the lease's TRIM_HORIZON).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("faulty"), &path).unwrap();
    let application = unique("redeliver-app");
    let (processor, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--idle-time-between-reads", "200ms",
        "--cache-dir", &cache, "--swap-canary-batches", "0", "--swap-buffer-mib", buffer,
    ];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("v1's 10 records", LIMIT, |log| delivered(log).len() >= 10).await;
    std::fs::copy(kcl_testkit::guest("tagged"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("both shards on v2", LIMIT, |log| count_lines(log, outcome) >= 2).await;
    for shard in &shards {
        stream.put(shard, &payloads(&format!("after-{shard}"), 3)).await;
    }
    host.wait_for("v2's records", LIMIT, |log| by_v2(log).len() >= 16).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));

    assert_eq!(count_lines(&log, outcome), 2, "{}", log.join("\n"));
    let (v1, v2): (Vec<Delivered>, Vec<Delivered>) = delivered(&log).into_iter().partition(|d| !d.processor.ends_with(V2));
    for shard in &shards {
        let on = |records: &[Delivered]| records.iter().filter(|d| &d.shard == shard).map(|d| d.sequence_number.clone()).collect::<Vec<_>>();
        let (by_v1, by_v2) = (on(&v1), on(&v2));
        assert_eq!(by_v1.len(), 5, "{shard}: v1 processed the first five");
        assert_eq!(by_v2[..5], by_v1[..], "{shard}: v2 was given v1's five again, in order, before anything new");
        assert_eq!(by_v2.len(), 8, "{shard}: then the three put after the swap, once");
    }
}

/// The processor hash on the first line of `log` that contains `needle`.
fn log_processor_hash(log: &[String], needle: &str) -> String {
    let line = log.iter().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} line"));
    let (_, rest) = line.split_once("processor=\"").unwrap_or_else(|| panic!("no processor on {line}"));
    rest.chars().take_while(char::is_ascii_hexdigit).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_goes_to_a_canary_first_and_back_when_it_keeps_trapping() {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("rollback"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    let application = unique("rollback-app");
    let admin = admin_address();
    let (processor, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--idle-time-between-reads", "200ms",
        "--cache-dir", &cache, "--swap-canary-batches", "1", "--swap-rollback-after", "3", "--admin-listen", &admin,
        "--failover-time", "1s",
    ];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;

    // v2 (the faulty guest) goes to one shard; one good batch there promotes it.
    std::fs::copy(kcl_testkit::guest("faulty"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("the canary", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    let log = host.log().await;
    let canary = log.iter().find(|l| l.contains("canary: this shard")).unwrap().rsplit_once("shard=").unwrap().1.trim_matches('"').to_owned();
    assert_eq!(count_lines(&log, "swapped the processor"), 1, "only the canary swapped");
    stream.put(&canary, &["fine-on-v2".to_owned()]).await;
    host.wait_for("the rest swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    let v2 = log_processor_hash(&host.log().await, "swapped the processor");
    heartbeats_report(&aws, &application, &v2, 1).await;

    // v2 traps on `panic`: three failures roll every shard back to v1, which processes it all.
    let mut all = vec!["fine-on-v2".to_owned()];
    for shard in &shards {
        let records = vec!["panic".to_owned(), format!("after-{shard}")];
        stream.put(shard, &records).await;
        all.extend(records.into_iter().filter(|r| r != "panic"));
    }
    host.wait_for("the rollback", LIMIT, |log| count_lines(log, "rolling back to") >= 1).await;
    host.wait_for("v1 on the rest", LIMIT, |log| shards.iter().all(|s| log.iter().any(|l| l.contains(" record ") && l.contains(&format!(" after-{s} after-{s} "))))).await;
    // The heartbeat reports the version the worker went back to.
    let v1 = log_processor_hash(&host.log().await, "processing shard=");
    heartbeats_report(&aws, &application, &v1, 1).await;
    let (_, metrics) = http_get(&admin, "/metrics").await;
    assert_eq!(series(&metrics, "kcl_host_processor_rollbacks_total", None), Some(1.0), "{metrics}");
    for shard in &shards {
        let swaps = series(&metrics, "kcl_host_processor_swaps_total", Some(shard)).unwrap_or_default();
        assert!(swaps >= 1.0, "{shard} swapped to v2 and back: {metrics}");
    }
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let panics_by_v1 = log.iter().filter(|l| l.contains("kcl_host::guest: record ") && l.contains(" panic panic ")).count();
    assert_eq!(panics_by_v1, 2, "v1 processed both `panic` records after the rollback:\n{}", log.join("\n"));
    for record in &all {
        assert!(log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(&format!(" {record} "))), "{record} lost:\n{}", log.join("\n"));
    }
    assert_eq!(count_lines(&log, "rolling back to"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_swaps_every_worker_and_rollback_brings_them_back() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("deploy"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let application = unique("deploy-app");
    let flags = ["--failover-time", "1s", "--swap-canary-batches", "0"];
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &flags);
    first.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let mut second = start_with("counter", &stream.name, &application, "worker-2", &flags);
    second.wait_for("its share", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;

    // Deployed from a file only this machine has, gone before the workers look:
    // they load it from the component table.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v2.wasm");
    std::fs::copy(kcl_testkit::guest("tagged"), &file).unwrap();
    let (code, text) = run_to_exit(&["deploy", &file.display().to_string(), "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("dynamodb://{application}-KclHostComponents/")), "{text}");
    std::fs::remove_file(&file).unwrap();
    for worker in [&mut first, &mut second] {
        worker.wait_for("the deployed version", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    }
    let (v1, v2) = (log_processor_hash(&first.log().await, "processing shard="), log_processor_hash(&first.log().await, "swapped the processor"));
    heartbeats_report(&aws, &application, &v2, 2).await;
    for shard in &shards {
        stream.put(shard, &[format!("v2-{shard}")]).await;
    }
    // Each worker's shard is processed by v2.
    for worker in [&mut first, &mut second] {
        worker.wait_for("a record by v2", LIMIT, |log| by_v2(log).iter().any(|d| d.data.starts_with("v2-"))).await;
    }

    let (code, text) = run_to_exit(&["deploy", "--rollback", "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    for worker in [&mut first, &mut second] {
        worker.wait_for("the version before", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    }
    heartbeats_report(&aws, &application, &v1, 2).await;
    let (a, log_a) = first.interrupt().await;
    let (b, log_b) = second.interrupt().await;
    assert!(a.success() && b.success(), "{}\n{}", log_a.join("\n"), log_b.join("\n"));
    for log in [&log_a, &log_b] {
        assert_eq!(count_lines(log, "deploy "), 2, "a swap to the deployed version, then back:\n{}", log.join("\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_idle_stream_the_canary_is_promoted_after_its_idle_time() {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("idle-canary"), 2).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    let application = unique("idle-canary-app");
    let (processor, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let args = ["run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", &cache];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    std::fs::copy(kcl_testkit::guest("tagged"), &path).unwrap();
    host.signal(SIGHUP);
    // No record comes: the canary gets none of its 3 batches, and the rollout goes on anyway.
    host.wait_for("both shards swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "the canary ran 10s (0 batches) without failing: every shard swaps"), 1, "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_fails_the_canary_input_is_refused() {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("canary-input"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let dir = tempfile::tempdir().unwrap();
    let (path, sample) = (dir.path().join("processor.wasm"), dir.path().join("sample.jsonl"));
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    std::fs::write(&sample, "{\"data\": \"fine\"}\n{\"data\": \"panic\"}\n").unwrap();
    let application = unique("canary-input-app");
    let (processor, cache, sample) = (path.display().to_string(), test_cache_dir().display().to_string(), sample.display().to_string());
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--idle-time-between-reads", "200ms",
        "--cache-dir", &cache, "--swap-canary-input", &sample,
    ];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("the shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    // The faulty guest traps on `panic`, which the sample has.
    std::fs::copy(kcl_testkit::guest("faulty"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("the refusal", LIMIT, |log| count_lines(log, "it failed on --swap-canary-input") >= 1).await;
    stream.put(&shard, &["still-v1".to_owned()]).await;
    host.wait_for("v1's record", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(" still-v1 still-v1 "))).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "swapped the processor"), 0, "no shard swapped");
}

/// The Rust counter swapped for the Python counter (the same logic) by
/// SIGHUP on two shards: the Rust version checkpoints in its
/// `shutdown(requested)`, the Python version starts there and is given every
/// later record once, in order, and its own checkpoint at the stop lands in
/// the lease table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_processor_swapped_for_its_python_twin_resumes_after_the_last_checkpoint() {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("to-python"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    for shard in &shards {
        stream.put(shard, &payloads(&format!("rust-{shard}"), 150)).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    let application = unique("to-python-app");
    let (processor, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--idle-time-between-reads", "200ms",
        "--cache-dir", &cache, "--swap-canary-batches", "0",
    ];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("the Rust version's 300 records", LIMIT, |log| delivered(log).len() >= 300).await;
    std::fs::copy(kcl_testkit::guest("py-counter"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("both shards on the Python version", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    for shard in &shards {
        stream.put(shard, &payloads(&format!("python-{shard}"), 50)).await;
    }
    let by_python = |log: &[String]| delivered(log).into_iter().filter(|d| !d.processor.contains("kcl-example-counter")).collect::<Vec<_>>();
    host.wait_for("the new records, by the Python version", LIMIT, |log| {
        by_python(log).iter().filter(|d| d.data.starts_with("python-")).count() >= 100
    })
    .await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));

    let (python, rust): (Vec<Delivered>, Vec<Delivered>) = delivered(&log).into_iter().partition(|d| !d.processor.contains("kcl-example-counter"));
    assert_eq!(count_lines(&log, "0 records since the last checkpoint delivered again"), 2, "the Rust version checkpointed as it stopped");
    let lease_checkpoints = checkpoints(&aws, &application).await;
    for shard in &shards {
        let data = |records: &[Delivered]| records.iter().filter(|d| &d.shard == shard).map(|d| d.data.clone()).collect::<Vec<_>>();
        assert_eq!(data(&rust), payloads(&format!("rust-{shard}"), 150), "{shard}: the Rust version, in order");
        assert_eq!(data(&python), payloads(&format!("python-{shard}"), 50), "{shard}: the Python version, once each and in order");
        let last = python.iter().rfind(|d| &d.shard == shard).unwrap();
        assert_eq!(lease_checkpoints.get(shard), Some(&last.sequence_number), "{shard}: the Python version checkpointed at the stop");
    }
}
