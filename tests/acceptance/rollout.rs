//! Hot swap rollouts under restarts, quick re-swaps, offers during a canary,
//! a split canary and slow checks; and the refusals of `deploy` and
//! `POST /swap`. What every test judges from the logs: on each shard, once a
//! record was processed by a version, no later record is processed by an
//! older one (unless a rollback was ordered), and nothing is lost.

use std::path::Path;

use super::*;

const SIGHUP: i32 = 1;

/// The host's name for a component: the start of its SHA-256.
fn hash_of(bytes: &[u8]) -> String {
    kcl_host::runtime::Processor::hash_of(bytes)
}

fn read_guest(name: &str) -> Vec<u8> {
    std::fs::read(kcl_testkit::guest(name)).unwrap()
}

/// The guest `name` with a custom section `tag` added at its end: the same
/// code as another version (another hash).
fn restamped(name: &str, tag: &str) -> Vec<u8> {
    let mut bytes = read_guest(name);
    let mut section = vec![tag.len() as u8];
    section.extend_from_slice(tag.as_bytes());
    bytes.extend_from_slice(&[0, section.len() as u8]);
    bytes.extend_from_slice(&section);
    bytes
}

/// The value of `name=` on a log line, without quotes.
fn field(line: &str, name: &str) -> Option<String> {
    let (_, rest) = line.split_once(&format!(" {name}="))?;
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split(' ').next()?,
    };
    Some(value.to_owned())
}

/// The shard named on the last line that contains `needle`.
fn shard_on_last(log: &[String], needle: &str) -> String {
    let line = log.iter().rev().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} line"));
    field(line, "shard").unwrap_or_else(|| panic!("no shard on {line}"))
}

/// Panics unless, on every shard, the versions that processed its records
/// and the versions it swapped to (in log order) follow `order`.
fn assert_in_order(log: &[String], order: &[String]) {
    let rank = |processor: &str| {
        let hash: String = processor.chars().take_while(char::is_ascii_hexdigit).collect();
        order.iter().position(|h| *h == hash).unwrap_or_else(|| panic!("an unknown version {processor}"))
    };
    let mut newest: BTreeMap<String, usize> = BTreeMap::new();
    for line in log {
        let (shard, processor, what) = match kcl_testkit::process::parse_delivered(line) {
            Some(d) => (d.shard, d.processor, d.data),
            None if line.contains("swapped the processor") => {
                (field(line, "shard").unwrap(), field(line, "processor").unwrap(), "its swap".to_owned())
            }
            None => continue,
        };
        let seen = newest.entry(shard.clone()).or_default();
        let now = rank(&processor);
        assert!(now >= *seen, "{shard}: {what} by {processor}, after a newer version:\n{}", log.join("\n"));
        *seen = now;
    }
}

/// `kcl-host run` of the file at `processor` with the tests' settings, a
/// compile cache in `cache`, and `extra` flags.
fn run_from(processor: &Path, stream: &str, application: &str, worker: &str, cache: &Path, extra: &[&str]) -> KclHost {
    let (processor, cache) = (processor.display().to_string(), cache.display().to_string());
    let mut args = vec![
        "run", &processor, "--stream", stream, "--application", application, "--worker-id", worker,
        "--idle-time-between-reads", "200ms", "--cache-dir", &cache,
    ];
    args.extend_from_slice(extra);
    KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args)
}

async fn shard_ids(stream: &TestStream) -> Vec<String> {
    stream.shards().await.into_iter().map(|s| s.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_second_swap_builds_on_the_version_before() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("reswap"), 4).await;
    let shards = shard_ids(&stream).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    let versions = [read_guest("counter"), read_guest("tagged"), restamped("tagged", "v3")];
    std::fs::write(&path, &versions[0]).unwrap();
    let mut host = run_from(&path, &stream.name, &unique("reswap-app"), "worker-1", &test_cache_dir(), &["--swap-canary-batches", "1"]);
    host.wait_for("every shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 4).await;
    let mut all = Vec::new();
    // v2, then v3 while v2 is on probation: each goes to a canary, then everywhere.
    for (n, version) in versions[1..].iter().enumerate() {
        std::fs::write(&path, version).unwrap();
        host.signal(SIGHUP);
        host.wait_for("the canary", LIMIT, |log| count_lines(log, "canary: this shard") > n).await;
        let canary = shard_on_last(&host.log().await, "canary: this shard");
        let first = format!("canary-{n}");
        stream.put(&canary, std::slice::from_ref(&first)).await;
        all.push(first);
        host.wait_for("every shard swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= 4 * (n + 1)).await;
        all.extend(one_each(&stream, &shards, &format!("after-{n}")).await);
        host.wait_for("the records", LIMIT, |log| processed(log, &all)).await;
    }
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let order: Vec<String> = versions.iter().map(|v| hash_of(v)).collect();
    assert_in_order(&log, &order);
    assert_eq!(count_lines(&log, "swapped the processor"), 8, "each shard swapped twice, v1 → v2 → v3:\n{}", log.join("\n"));
    let exit = log.iter().find(|l| l.contains("stopped after")).unwrap();
    assert_eq!(exit.matches(" -> ").count(), 2, "settled on v1, v2, v3 and nothing between: {exit}");
    let settled: Vec<usize> = order.iter().map(|hash| exit.find(hash.as_str()).unwrap_or_else(|| panic!("{hash} missing: {exit}"))).collect();
    assert!(settled.is_sorted(), "in order: {exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_or_new_worker_starts_on_the_deployed_version() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("restart-deployed"), 2).await;
    let shards = shard_ids(&stream).await;
    let application = unique("restart-deployed-app");
    let flags = ["--failover-time", "2s", "--swap-canary-batches", "0"];
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &flags);
    first.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let (code, text) = run_to_exit(&["deploy", &guest("tagged"), "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    first.wait_for("the deployed version", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    let before = one_each(&stream, &shards, "before-crash").await;
    first.wait_for("v2's records", LIMIT, |log| processed(log, &before)).await;
    first.kill().await;

    // Restarted with the same id, then replaced by a new one: both with v1
    // on the command line, and both run v2 from their first record.
    let v2 = hash_of(&read_guest("tagged"));
    for worker in ["worker-1", "worker-2"] {
        let mut host = start_with("counter", &stream.name, &application, worker, &flags);
        host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize-v2 ") >= 2).await;
        let after = one_each(&stream, &shards, &format!("after-{worker}")).await;
        host.wait_for("the new records", LIMIT, |log| processed(log, &after)).await;
        let log = host.log().await;
        host.kill().await;
        assert_eq!(count_lines(&log, "as deployed with `kcl-host deploy`"), 1, "{worker} says why it runs v2:\n{}", log.join("\n"));
        assert_eq!(count_lines(&log, "kcl_host::guest: initialize "), 0, "{worker} never started v1:\n{}", log.join("\n"));
        assert_eq!(count_lines(&log, "swapped the processor"), 0, "{worker} had nothing to swap");
        for d in delivered(&log) {
            assert!(d.processor.starts_with(&v2), "{worker}: {} processed by {}:\n{}", d.data, d.processor, log.join("\n"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_offer_wins_during_a_canary() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("offer-on-canary"), 2).await;
    let shards = shard_ids(&stream).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    let application = unique("offer-on-canary-app");
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    // The default canary: 3 batches, which an idle stream never gives it.
    let mut host = run_from(&path, &stream.name, &application, "worker-1", &test_cache_dir(), &[]);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    std::fs::copy(kcl_testkit::guest("tagged"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("the canary", LIMIT, |log| count_lines(log, "canary: this shard") >= 1).await;
    host.signal(SIGHUP);
    host.wait_for("the same offer again", LIMIT, |log| count_lines(log, "is being rolled out already") >= 1).await;
    // v1 again: the canary goes back to it and v2 is never promoted.
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("the canary back on v1", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    let after = one_each(&stream, &shards, "after").await;
    host.wait_for("the new records", LIMIT, |log| processed(log, &after)).await;
    let v1 = hash_of(&read_guest("counter"));
    heartbeats_report(&aws, &application, &v1, 1).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "canary: this shard"), 1, "offering v2 again did not restart its rollout:\n{}", log.join("\n"));
    assert_eq!(count_lines(&log, "every shard swaps"), 0, "v2 was never promoted:\n{}", log.join("\n"));
    for d in delivered(&log) {
        assert!(d.processor.starts_with(&v1), "{} processed by {}:\n{}", d.data, d.processor, log.join("\n"));
    }
    let exit = log.iter().find(|l| l.contains("stopped after")).unwrap();
    assert!(!exit.contains(" -> "), "the worker stayed on v1: {exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_splits_hands_the_new_version_to_its_children() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("canary-split"), 2).await;
    let shards = shard_ids(&stream).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    let mut host = run_from(&path, &stream.name, &unique("canary-split-app"), "worker-1", &test_cache_dir(), &[]);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    // The busiest shard is the canary.
    let busy = payloads(&format!("busy-{}", shards[0]), 3);
    stream.put(&shards[0], &busy).await;
    host.wait_for("the first records", LIMIT, |log| processed(log, &busy)).await;
    std::fs::copy(kcl_testkit::guest("tagged"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("the canary", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    assert_eq!(shard_on_last(&host.log().await, "canary: this shard"), shards[0]);

    let children = stream.split(&shards[0]).await;
    host.wait_for("the other shard swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    let mut all = one_each(&stream, &children, "child").await;
    all.extend(one_each(&stream, &shards[1..], "other").await);
    host.wait_for("the new records", LIMIT, |log| processed(log, &all)).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let v2 = hash_of(&read_guest("tagged"));
    assert_eq!(count_lines(&log, "was processed to its end: every shard swaps"), 1, "{}", log.join("\n"));
    for child in &children {
        let started = log.iter().find(|l| l.contains(" processing ") && field(l, "shard").as_deref() == Some(child.as_str())).unwrap();
        assert!(field(started, "processor").unwrap().starts_with(&v2), "{child} started on the canary's version: {started}");
    }
    for d in delivered(&log).into_iter().filter(|d| !d.data.starts_with("busy-")) {
        assert!(d.processor.starts_with(&v2), "{} processed by {}:\n{}", d.data, d.processor, log.join("\n"));
    }
    assert_in_order(&log, &[hash_of(&read_guest("counter")), v2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_check_of_a_deployed_version_moves_no_lease() {
    const SIGSTOP: i32 = 19;
    const SIGCONT: i32 = 18;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("slow-check"), 2).await;
    let application = unique("slow-check-app");
    // An empty compile cache each: the deployed Go component takes the
    // debug-built host seconds to compile, longer than the failover time.
    let caches = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let counter = kcl_testkit::guest("counter");
    let flags = ["--failover-time", "3s", "--swap-canary-batches", "0"];
    let mut first = run_from(&counter, &stream.name, &application, "worker-1", caches[0].path(), &flags);
    first.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let mut second = run_from(&counter, &stream.name, &application, "worker-2", caches[1].path(), &flags);
    second.wait_for("its share", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    first.wait_for("the share given away", LIMIT, |log| count_lines(log, "gave the lease back") >= 1).await;
    let owners = |leases: Vec<Lease>| leases.into_iter().map(|l| (l.key, l.owner)).collect::<BTreeMap<_, _>>();
    let before = owners(leases(&aws.dynamodb, &application).await);

    // Stored as `kcl-host deploy` stores it, with the row written at a chosen moment.
    let bytes = read_guest("go-counter");
    let components = kcl_host::swap::store::ComponentStore::new(aws.dynamodb.clone(), &application);
    components.ensure().await.unwrap();
    let hash = hash_of(&bytes);
    components.put(&hash, &bytes).await.unwrap();
    let wanted = kcl_host::swap::Version { source: components.source(&hash), hash, component: None };
    // worker-2's heartbeat stands still (for less than the failover time)
    // around worker-1's read of the row: judged on a clock read after the
    // compile that follows, it would look dead.
    let deploy_row = kcl_host::swap::deploy::DeployRow::new(aws.dynamodb.clone(), &application);
    second.signal(SIGSTOP);
    tokio::time::sleep(Duration::from_millis(700)).await;
    deploy_row.write(&wanted, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    second.signal(SIGCONT);
    for worker in [&mut first, &mut second] {
        worker.wait_for("the deployed version", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    }
    let after = owners(leases(&aws.dynamodb, &application).await);
    let (_, log_a) = first.interrupt().await;
    let (_, log_b) = second.interrupt().await;
    for log in [&log_a, &log_b] {
        assert_eq!(judged_dead(log), 0, "no live worker was judged dead:\n{}", log.join("\n"));
    }
    assert_eq!(before, after, "no lease moved during the slow check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_right_after_the_first_deploy_brings_every_worker_back() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("first-rollback"), 2).await;
    let application = unique("first-rollback-app");
    let dir = tempfile::tempdir().unwrap();
    let (v1_path, v2_path) = (dir.path().join("v1.wasm"), dir.path().join("v2.wasm"));
    std::fs::copy(kcl_testkit::guest("counter"), &v1_path).unwrap();
    std::fs::copy(kcl_testkit::guest("tagged"), &v2_path).unwrap();
    let flags = ["--failover-time", "1s", "--swap-canary-batches", "0"];
    let mut first = run_from(&v1_path, &stream.name, &application, "worker-1", &test_cache_dir(), &flags);
    first.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let (code, text) = run_to_exit(&["deploy", &guest("tagged"), "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    let v1 = hash_of(&read_guest("counter"));
    assert!(text.contains(&format!("(before: {v1}")), "the running version is the rollback target: {text}");
    assert!(!text.contains("kcl_host::guest"), "deploy does not print its test instance's lines: {text}");
    first.wait_for("v2", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    // v1's file only ever was on worker-1's machine; worker-2 never ran it.
    std::fs::remove_file(&v1_path).unwrap();
    let mut second = run_from(&v2_path, &stream.name, &application, "worker-2", &test_cache_dir(), &flags);
    second.wait_for("its share", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize-v2 ") >= 1).await;

    let (code, text) = run_to_exit(&["deploy", "--rollback", "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    second.wait_for("v1, from the component table", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    heartbeats_report(&aws, &application, &v1, 2).await;
    let (_, log_a) = first.interrupt().await;
    let (_, log_b) = second.interrupt().await;
    for log in [&log_a, &log_b] {
        assert_eq!(log.iter().filter(|l| l.contains(" ERROR ")).count(), 0, "{}", log.join("\n"));
    }
}

#[tokio::test]
async fn deploy_to_an_application_that_does_not_exist_creates_nothing() {
    let aws = clients().await;
    let application = unique("no-such-app");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.wasm").display().to_string();
    let cases = [
        (vec!["deploy", missing.as_str(), "--application", &application], "cannot read"),
        (vec!["deploy", "--rollback", "--application", &application], "no kcl-host application"),
    ];
    let counter = guest("counter");
    let exists = (vec!["deploy", counter.as_str(), "--application", &application], "no kcl-host application");
    for (args, says) in cases.into_iter().chain([exists]) {
        let (code, text) = run_to_exit(&args, &[]).await;
        assert_ne!(code, 0, "{args:?}: {text}");
        assert!(text.contains(says), "{args:?} says {says:?}: {text}");
        if says == "no kcl-host application" {
            assert!(text.contains(&format!("`{application}-KclHostControl`")), "the message names the table: {text}");
        }
    }
    let tables = aws.dynamodb.list_tables().send().await.unwrap();
    let made: Vec<&String> = tables.table_names().iter().filter(|t| t.starts_with(&application)).collect();
    assert!(made.is_empty(), "a refused deploy created {made:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_swap_knows_a_component_by_its_bytes_and_quotes_little_of_a_bad_body() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("post-body"), 1).await;
    let admin = admin_address();
    let mut host = start_with("counter", &stream.name, &unique("post-body-app"), "worker-1", &["--admin-listen", &admin]);
    host.wait_for("the shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    for junk in [vec![b'x'; 1 << 20], b"/tmp/a\0b".to_vec()] {
        let (status, body) = http(&admin, "POST", "/swap", "application/x-www-form-urlencoded", &junk).await;
        assert!(status.contains("422"), "{status}");
        assert!(body.len() < 400, "the answer quotes little of the body: {} bytes", body.len());
        assert!(body.contains("neither a component"), "{body}");
    }
    // A body over the cap is refused from its length, before it is sent (as curl waits on `Expect: 100-continue`).
    let over_cap = over_cap_answer(&admin).await;
    assert!(over_cap.starts_with("HTTP/1.1 413"), "{over_cap}");
    assert!(over_cap.contains("over the 256 MiB"), "the answer names the cap: {over_cap}");
    // What `curl --data-binary @v2.wasm` sends: the component, as a form.
    let (status, body) = http(&admin, "POST", "/swap", "application/x-www-form-urlencoded", &read_guest("tagged")).await;
    assert!(status.contains("200"), "{status}: {body}");
    host.wait_for("the swap", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success());
    assert!(log.iter().all(|l| l.len() < 2000), "no log line quotes a body");
}

/// The answer to a `POST /swap` announcing a 300 MiB body, none of it sent.
async fn over_cap_answer(admin: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await.expect("the admin listener accepts");
    let head = format!("POST /swap HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/wasm\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n", 300u64 << 20);
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0; 4096];
    let read = tokio::time::timeout(LIMIT, stream.read(&mut answer)).await.expect("an answer before any of the body");
    String::from_utf8_lossy(&answer[..read.unwrap()]).into_owned()
}
