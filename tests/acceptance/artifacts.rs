//! The fleet's compiled artifacts: `kcl-host deploy` with
//! `KCL_HOST_ARTIFACT_KEY` stores the deployed component's compiled code,
//! sealed; a worker with an empty compile cache loads it instead of
//! compiling (even when its command line names an older file) only when its
//! own key checks the seal, and never a tampered one.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use kcl_testkit::faults::{Fault, FaultProxy, Rule};

use super::faults::upstream;
use super::*;

const KEY: &str = "kcl-host-test-fleet-key-0123456789abcdef";

/// `kcl-host run` of `processor` with an empty compile cache of its own and
/// `key` as the fleet's key, `env` and `extra` flags; returns the worker and its cache.
fn with_empty_cache(processor: &str, stream: &str, application: &str, worker: &str, key: &str, env: &[(&str, &str)], extra: &[&str]) -> (KclHost, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().display().to_string();
    let mut args = vec!["run", processor, "--stream", stream, "--application", application, "--worker-id", worker, "--idle-time-between-reads", "200ms", "--cache-dir", &dir];
    args.extend_from_slice(extra);
    let env = [&[("KCL_HOST_ARTIFACT_KEY", key)], env].concat();
    (KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, &env), cache)
}

/// Runs a worker of `processor` (with an empty cache and `key`) until it
/// processed a new record on every shard; returns its log and cache.
async fn serve_a_round(stream: &TestStream, application: &str, processor: &str, key: &str, round: &str) -> (Vec<String>, tempfile::TempDir) {
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let (mut host, cache) = with_empty_cache(processor, &stream.name, application, round, key, &[], &[]);
    let sent = one_each(stream, &shards, round).await;
    host.wait_for("the round's records", LIMIT, |log| processed(log, &sent)).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    (log, cache)
}

/// The keys of the component table's rows.
async fn component_rows(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Vec<String> {
    let scanned = dynamodb.scan().table_name(table).send().await.unwrap();
    scanned.items().iter().filter_map(|row| row.get("key")?.as_s().ok().cloned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cache_loads_the_deployed_compiled_code_only_under_the_fleets_key_and_never_tampered() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("artifacts"), 2).await;
    let application = unique("artifacts-app");
    let (tagged, counter) = (guest("tagged"), guest("counter"));
    // The application's tables come from its first worker.
    serve_a_round(&stream, &application, &counter, KEY, "first").await;
    let table = format!("{application}-KclHostComponents");
    let (code, text) = run_to_exit(&["deploy", &tagged, "--application", &application], &[("KCL_HOST_ARTIFACT_KEY", "too-short")]).await;
    assert!(code != 0 && text.contains("needs at least 32"), "{code}: {text}");
    assert!(aws.dynamodb.describe_table().table_name(&table).send().await.is_err(), "a refused deploy created {table}");
    let (code, text) = run_to_exit(&["deploy", &tagged, "--application", &application], &[("KCL_HOST_ARTIFACT_KEY", KEY)]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("sealed with KCL_HOST_ARTIFACT_KEY"), "{text}");

    // The key the deploy used: loaded, not compiled, and kept in the cache.
    let (log, cache) = serve_a_round(&stream, &application, &tagged, KEY, "sealed").await;
    let text = log.join("\n");
    assert_eq!(count_lines(&log, "that `kcl-host deploy` stored"), 1, "{text}");
    assert_eq!(count_lines(&log, "compiling the component"), 0, "{text}");
    assert!(count_lines(&log, "record-v2") >= 2, "the deployed version processed the round: {text}");
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 1, "the artifact is cached for the next start");

    // An older file on the command line: neither it nor the deployed version is compiled.
    let (log, _) = serve_a_round(&stream, &application, &counter, KEY, "older-file").await;
    let text = log.join("\n");
    assert_eq!(count_lines(&log, "as deployed with `kcl-host deploy`"), 1, "{text}");
    assert_eq!(count_lines(&log, "compiling the component"), 0, "{text}");
    assert_eq!(count_lines(&log, "kcl_host::guest: record "), 0, "the command line's version processed nothing: {text}");

    // Another key: the seal does not check, so it compiles.
    let (log, _) = serve_a_round(&stream, &application, &tagged, "another-fleet-key-0123456789abcdef0123", "unsealed").await;
    assert_eq!(count_lines(&log, "is not sealed with this worker's KCL_HOST_ARTIFACT_KEY"), 1, "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "compiling the component"), 1, "{}", log.join("\n"));

    // The right key, but a byte of the stored code changed: compiled again.
    let rows = component_rows(&aws.dynamodb, &table).await;
    let chunk = rows.iter().find(|key| key.contains('@') && key.ends_with("/0")).unwrap_or_else(|| panic!("no artifact row in {rows:?}"));
    let row = aws.dynamodb.get_item().table_name(&table).key("key", AttributeValue::S(chunk.clone())).send().await.unwrap();
    let mut data = row.item().unwrap()["data"].as_b().unwrap().as_ref().to_vec();
    let middle = data.len() / 2;
    data[middle] ^= 1;
    let put = aws.dynamodb.put_item().table_name(&table).item("key", AttributeValue::S(chunk.clone()));
    put.item("data", AttributeValue::B(Blob::new(data))).send().await.unwrap();
    let (log, _) = serve_a_round(&stream, &application, &tagged, KEY, "tampered").await;
    assert_eq!(count_lines(&log, "is not sealed with this worker's KCL_HOST_ARTIFACT_KEY"), 1, "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "compiling the component"), 1, "{}", log.join("\n"));

    // Two deploys later the version is dropped, and its compiled code with it.
    let tagged_hash = chunk.split('@').next().unwrap().to_owned();
    for file in [&counter, &guest("noop")] {
        let (code, text) = run_to_exit(&["deploy", file, "--application", &application], &[("KCL_HOST_ARTIFACT_KEY", KEY)]).await;
        assert_eq!(code, 0, "{text}");
    }
    let rows = component_rows(&aws.dynamodb, &table).await;
    assert!(!rows.iter().any(|key| key.starts_with(&tagged_hash)), "{tagged_hash} left rows: {rows:?}");
    assert!(rows.iter().filter(|key| key.contains('@') && !key.contains('/')).count() == 2, "the two versions kept have their artifacts: {rows:?}");
}

/// The component table unreachable (every read of it refused), then
/// throttled, slow and cut: a worker with an empty cache and an older file
/// runs that file while the deployed version cannot be read, and swaps to it
/// once it can; killed (-9), it is replaced by one that reads the deployed
/// version through the faults at start. Every record is processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_component_table_delays_the_deployed_version_and_loses_no_record_across_a_kill() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("artifacts-faults"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let application = unique("artifacts-faults-app");
    let (tagged, counter) = (guest("tagged"), guest("counter"));
    serve_a_round(&stream, &application, &counter, KEY, "first").await;
    let (code, text) = run_to_exit(&["deploy", &tagged, "--application", &application], &[("KCL_HOST_ARTIFACT_KEY", KEY)]).await;
    assert_eq!(code, 0, "{text}");

    let proxy = FaultProxy::start(&upstream("DYNAMODB")).await;
    let components = Some(format!("{application}-KclHostComponents"));
    let read = |fault, times| Rule { operation: Some("GetItem"), table: components.clone(), body_contains: None, fault, times };
    proxy.set(vec![read(Fault::Fail(500, "InternalFailure"), None)]);
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint.as_str())];
    let flags = ["--failover-time", "2s", "--swap-canary-batches", "0"];
    let (mut first, _cache) = with_empty_cache(&counter, &stream.name, &application, "worker-1", KEY, &env, &flags);
    let mut all = one_each(&stream, &shards, "outage").await;
    first.wait_for("the outage's records, by the command line's version", LIMIT, |log| processed(log, &all)).await;
    assert!(count_lines(&first.log().await, "until the deployed") >= 1, "{}", first.log().await.join("\n"));

    // The table back: the worker follows the deploy row to v2.
    proxy.set(Vec::new());
    first.wait_for("the deployed version", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    all.extend(one_each(&stream, &shards, "healed").await);
    first.wait_for("the healed records", LIMIT, |log| processed(log, &all)).await;
    let mut log = first.log().await;
    first.kill().await;

    proxy.set(vec![
        read(Fault::Fail(400, "ThrottlingException"), Some(2)),
        read(Fault::Fail(500, "InternalFailure"), Some(2)),
        read(Fault::Delay(Duration::from_millis(1500)), Some(2)),
        read(Fault::Reset, Some(1)),
    ]);
    let (mut second, _cache) = with_empty_cache(&counter, &stream.name, &application, "worker-2", KEY, &env, &flags);
    let after = one_each(&stream, &shards, "after-kill").await;
    second.wait_for("the records after the kill", LIMIT, |log| processed(log, &after)).await;
    all.extend(after);
    let (status, second_log) = second.interrupt().await;
    assert!(status.success(), "{}", second_log.join("\n"));
    assert!(proxy.counts().faulted >= 7, "every fault met: {:?}", proxy.counts().faulted);
    assert_eq!(count_lines(&second_log, "as deployed with `kcl-host deploy`"), 1, "{}", second_log.join("\n"));
    assert_eq!(count_lines(&second_log, "kcl_host::guest: record "), 0, "only v2 ran on worker-2: {}", second_log.join("\n"));
    log.extend(second_log);
    assert!(processed(&log, &all), "nothing lost:\n{}", log.join("\n"));
}
