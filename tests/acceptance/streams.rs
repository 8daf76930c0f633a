//! One application, several streams: one worker balances its leases over
//! every stream, the keys name the stream as Java KCL's multi-stream
//! applications' do, and a table either made can be taken over by the other
//! with its checkpoints.

use super::fleet::{covers, delivered_set, only_after_checkpoints_twice, put_all};
use super::*;
use kcl_testkit::java_kcl3;

/// The stream name in a multi-stream lease key (`account:stream:creationEpoch:shardId`).
fn stream_of(key: &str) -> &str {
    key.split(':').nth(1).unwrap_or_else(|| panic!("`{key}` names no stream"))
}

/// Puts 10 records on every open shard of `a` (data `{phase}-a-…`) and of
/// `b` (`{phase}-b-…`); adds them to `all` and returns them.
async fn put_both(a: &TestStream, b: &TestStream, phase: &str, all: &mut BTreeSet<String>) -> BTreeSet<String> {
    let mut put = BTreeSet::new();
    put_all(a, &format!("{phase}-a"), &mut put).await;
    put_all(b, &format!("{phase}-b"), &mut put).await;
    all.extend(put.iter().cloned());
    put
}

/// How many leases of each stream each worker owns.
async fn owners_by_stream(aws: &AwsClients, application: &str) -> BTreeMap<(String, String), usize> {
    let mut owned = BTreeMap::new();
    for lease in leases(&aws.dynamodb, application).await {
        *owned.entry((lease.owner.clone().unwrap_or_default(), stream_of(&lease.key).to_owned())).or_default() += 1;
    }
    owned
}

/// Two streams of two shards on one worker; a second worker joins and is
/// given one lease of each stream (not two of one). Every record of both
/// streams is processed once, each by a shard loop labelled with its
/// stream, and `status` and `/metrics` name the streams. Then a third
/// stream is added and the workers restart one at a time: its records are
/// processed, nothing twice, and each worker ends with one lease of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_two_streams_is_joined_by_a_second_that_takes_a_lease_of_each_and_a_third_stream_is_picked_up_on_restart() {
    let aws = clients().await;
    let (a, b) = (TestStream::create(&aws.kinesis, &unique("orders"), 2).await, TestStream::create(&aws.kinesis, &unique("refunds"), 2).await);
    let application = unique("streams-app");
    let both = format!("{},{}", a.name, b.name);
    let mut records = BTreeSet::new();
    put_both(&a, &b, "before", &mut records).await;
    let mut first = start_with("counter", &both, &application, "worker-1", &["--failover-time", "1s"]);
    first.wait_for("every record of both streams", LIMIT, |log| covers(log, &[], &records)).await;

    let rows = aws.dynamodb.scan().table_name(&application).send().await.unwrap();
    let mut per_stream = BTreeMap::new();
    for row in rows.items() {
        let key = row["leaseKey"].as_s().unwrap();
        let (stream, shard) = key.rsplit_once(':').unwrap();
        assert!(key.starts_with("000000000000:"), "the account from the stream's ARN: {key}");
        assert_eq!((row["streamName"].as_s().unwrap(), row["shardId"].as_s().unwrap()), (&stream.to_owned(), &shard.to_owned()), "Java KCL reads these");
        *per_stream.entry(stream_of(key).to_owned()).or_insert(0) += 1;
    }
    assert_eq!(per_stream, BTreeMap::from([(a.name.clone(), 2), (b.name.clone(), 2)]));
    for d in first.delivered().await {
        let expected = if d.data.starts_with("before-a-") { &a.name } else { &b.name };
        assert_eq!(stream_of(&d.shard), expected, "the guest's line names the record's stream: {d:?}");
    }

    let admin = admin_address();
    let mut second = start_with("counter", &both, &application, "worker-2", &["--failover-time", "1s", "--admin-listen", &admin]);
    first.wait_for("two leases given back", LIMIT, |log| count_lines(log, "gave the lease back") >= 2).await;
    second.wait_for("two leases", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let balanced: BTreeMap<(String, String), usize> =
        [("worker-1", &a.name), ("worker-1", &b.name), ("worker-2", &a.name), ("worker-2", &b.name)].into_iter().map(|(w, s)| ((w.to_owned(), s.clone()), 1)).collect();
    assert_eq!(owners_by_stream(&aws, &application).await, balanced, "one lease of each stream per worker");

    put_both(&a, &b, "after", &mut records).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    let (by_first, by_second) = loop {
        let (by_first, by_second) = (first.delivered().await, second.delivered().await);
        let seen: BTreeSet<String> = by_first.iter().chain(&by_second).map(|d| d.data.clone()).collect();
        if seen.is_superset(&records) {
            break (by_first, by_second);
        }
        assert!(tokio::time::Instant::now() < deadline, "records never processed: {:?}", records.difference(&seen).take(5).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let counts = delivery_counts(by_first.iter().chain(&by_second));
    assert_eq!(delivered_set(&counts), records, "every record of both streams processed");
    assert_eq!(by_first.len() + by_second.len(), records.len(), "each lease moved after a checkpoint: no duplicates");

    let (code, status) = run_to_exit(&["status", "--application", &application], &[]).await;
    for stream in [&a.name, &b.name] {
        let below = status.split(&format!("stream {stream}:\n")).nth(1).unwrap_or_default();
        assert!(code == 0 && below.starts_with("shardId-000000000000 "), "status shows each stream's shards under its name:\n{status}");
    }
    let (_, metrics) = http_get(&admin, "/metrics").await;
    let label = |stream: &str| vec![format!("stream=\"{stream}\""), "shard=\"shardId-".to_owned()];
    assert!(series_labelled(&metrics, "kcl_host_records_processed_total", &label(&a.name)).is_some(), "{metrics}");
    assert!(series_labelled(&metrics, "kcl_host_records_processed_total", &label(&b.name)).is_some(), "{metrics}");

    // A third stream joins the list, and the workers restart one at a time
    // (SIGINT: each gives its leases back after a checkpoint).
    let c = TestStream::create(&aws.kinesis, &unique("returns"), 2).await;
    put_all(&c, "added-c", &mut records).await;
    let three = format!("{both},{}", c.name);
    let mut earlier: Vec<Delivered> = Vec::new();
    let (exit, log) = first.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));
    earlier.extend(delivered(&log));
    let first = start_with("counter", &three, &application, "worker-1", &["--failover-time", "1s"]);
    // A rolling restart: the next worker stops once this one holds its share (3 of 6) again.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let owners = owners_by_stream(&aws, &application).await;
        if owners.iter().filter(|((worker, _), _)| worker == "worker-1").map(|(_, n)| n).sum::<usize>() >= 3 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the restarted worker never took its share: {owners:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (exit, log) = second.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));
    earlier.extend(delivered(&log));
    let second = start_with("counter", &three, &application, "worker-2", &["--failover-time", "1s"]);
    let deadline = tokio::time::Instant::now() + LIMIT;
    let (by_first, by_second) = loop {
        let (by_first, by_second) = (first.delivered().await, second.delivered().await);
        let seen: BTreeSet<String> = earlier.iter().chain(&by_first).chain(&by_second).map(|d| d.data.clone()).collect();
        if seen.is_superset(&records) {
            break (by_first, by_second);
        }
        assert!(tokio::time::Instant::now() < deadline, "records never processed: {:?}", records.difference(&seen).take(5).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let counts = delivery_counts(earlier.iter().chain(&by_first).chain(&by_second));
    assert_eq!(delivered_set(&counts), records, "the added stream's records too");
    assert_eq!(earlier.len() + by_first.len() + by_second.len(), records.len(), "restarts one at a time processed nothing twice");
    let deadline = tokio::time::Instant::now() + LIMIT;
    let want: BTreeMap<(String, String), usize> =
        ["worker-1", "worker-2"].iter().flat_map(|w| [&a.name, &b.name, &c.name].map(|s| ((w.to_string(), s.clone()), 1))).collect();
    while owners_by_stream(&aws, &application).await != want {
        assert!(tokio::time::Instant::now() < deadline, "not one lease of each stream per worker: {:?}", owners_by_stream(&aws, &application).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for worker in [first, second] {
        let (exit, log) = worker.interrupt().await;
        assert!(exit.success(), "{}", log.join("\n"));
    }
}

/// kcl-host and Java KCL 3.x hand a two-stream application back and forth:
/// kcl-host makes the table (multi-stream keys) and stops; a Java KCL
/// multi-stream worker (`MultiStreamTracker`) reads it and goes on from
/// kcl-host's checkpoints; kcl-host then takes the rows Java wrote over
/// from Java's checkpoints. Nothing is processed twice, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_stream_table_passes_from_kcl_host_to_java_kcl_and_back_with_its_checkpoints() {
    let aws = java_kcl3::clients().await;
    let endpoint = java_kcl3::dynamodb_endpoint();
    let (a, b) = (TestStream::create(&aws.kinesis, &unique("orders"), 1).await, TestStream::create(&aws.kinesis, &unique("refunds"), 1).await);
    let application = unique("streams-java-app");
    let both = format!("{},{}", a.name, b.name);
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())];
    let flags = ["--failover-time", "4000ms", "--lease-renewal", "per-lease"];
    let mut all = BTreeSet::new();
    let first = put_both(&a, &b, "host", &mut all).await;
    let mut host = start_with_env("counter", &both, &application, "kcl-host-1", &flags, &env);
    host.wait_for("the first records", LIMIT, |log| covers(log, &[], &first)).await;
    host.signal(SIGTERM);
    let (exit, host_log) = host.wait_exit(LIMIT).await;
    assert!(exit.success(), "{}", host_log.join("\n"));
    let by_host = delivered(&host_log);

    let second = put_both(&a, &b, "java", &mut all).await;
    let mut java = java_kcl3::spawn(&both, &application, "java-1", 4_000);
    java.wait_for("the records after kcl-host's checkpoints", LIMIT, |log| covers(log, &[], &second)).await;
    java.signal(SIGTERM);
    let (_, java_log) = java.wait_exit(LIMIT).await;
    assert_eq!(count_lines(&java_log, "java-kcl: stopped"), 1, "a graceful stop, checkpointed: {}", java_log.join("\n"));
    let by_java: Vec<Delivered> = java_log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).collect();
    assert!(by_java.iter().all(|d| !first.contains(&d.data)), "Java KCL went on from kcl-host's checkpoints");
    for d in &by_java {
        let expected = if d.data.starts_with("java-a-") { &a.name } else { &b.name };
        assert_eq!(stream_of(&d.shard), expected, "Java's multi-stream key names the same stream: {d:?}");
    }

    let third = put_both(&a, &b, "back", &mut all).await;
    let mut host = start_with_env("counter", &both, &application, "kcl-host-2", &flags, &env);
    host.wait_for("the records after Java's checkpoints", LIMIT, |log| covers(log, &[], &third)).await;
    let (exit, back_log) = host.interrupt().await;
    assert!(exit.success(), "{}", back_log.join("\n"));
    let by_back = delivered(&back_log);
    let counts = delivery_counts(by_host.iter().chain(&by_java).chain(&by_back));
    assert_eq!(delivered_set(&counts), all, "every record of both streams, none lost");
    assert_eq!(by_host.len() + by_java.len() + by_back.len(), all.len(), "each took over at the other's checkpoint: nothing twice");
    let keys: BTreeSet<String> = leases(&aws.dynamodb, &application).await.into_iter().map(|l| l.key.into()).collect();
    assert_eq!(keys.len(), 2, "one lease per stream, shared by both kinds: {keys:?}");
}

/// Two streams resharded at once — a split of one, a merge of the other —
/// while GetRecords fails and is throttled now and then, and the worker is
/// killed (-9) and replaced: every record of both streams is processed;
/// each child's lease names its parents by its own stream's keys, and each
/// parent reached `SHARD_END` before any child record was delivered; a
/// record delivered twice was delivered by the killed worker after the
/// checkpoint it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_streams_resharded_at_once_under_failing_reads_and_a_kill_keep_each_streams_lineage() {
    use super::faults::{start_through, upstream};
    use kcl_testkit::faults::{Fault, FaultProxy, Rule};

    let aws = clients().await;
    let (a, b) = (TestStream::create(&aws.kinesis, &unique("orders"), 2).await, TestStream::create(&aws.kinesis, &unique("refunds"), 2).await);
    let application = unique("streams-reshard-app");
    let both = format!("{},{}", a.name, b.name);
    let proxy = FaultProxy::start(&upstream("KINESIS")).await;
    let reads = |fault, times| Rule { table: None, operation: Some("GetRecords"), body_contains: None, fault, times: Some(times) };
    proxy.set(vec![reads(Fault::Fail(500, "InternalFailure"), 4), reads(Fault::Fail(400, "ProvisionedThroughputExceededException"), 4)]);
    let mut records = BTreeSet::new();
    put_both(&a, &b, "before", &mut records).await;
    let flags = ["--failover-time", "1s"];
    let mut first = start_through(&proxy, "KINESIS", "counter", &both, &application, "worker-1", &flags);
    first.wait_for("every record before the reshard", LIMIT, |log| covers(log, &[], &records)).await;

    let a_parent = a.shards().await[0].id.clone();
    a.split(&a_parent).await;
    let b_parents: Vec<String> = b.shards().await.into_iter().map(|s| s.id).collect();
    b.merge(&b_parents[0], &b_parents[1]).await;
    put_both(&a, &b, "after", &mut records).await;
    proxy.set(vec![reads(Fault::Fail(500, "InternalFailure"), 4), reads(Fault::Fail(400, "ProvisionedThroughputExceededException"), 4)]);
    first.wait_for("a child's first record", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains("after-"))).await;
    let checkpoints: BTreeMap<String, Checkpoint> = leases(&aws.dynamodb, &application).await.into_iter().map(|l| (l.key.into(), l.checkpoint)).collect();
    let before_kill = delivered(&first.kill().await);
    let mut second = start_through(&proxy, "KINESIS", "counter", &both, &application, "worker-2", &flags);
    // Up before anything else: the killed worker may have delivered every
    // record already, and a SIGINT before the worker's handler is set kills it.
    second.wait_for("its first lease pass", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;
    second.wait_for("every record", LIMIT, |log| covers(log, &before_kill, &records)).await;

    let by_second = second.delivered().await;
    let counts = delivery_counts(before_kill.iter().chain(&by_second));
    assert_eq!(delivered_set(&counts), records, "every record of both streams, none lost");
    only_after_checkpoints_twice(&counts, &checkpoints);
    assert!(proxy.counts().faulted >= 8, "the reads failed: {:?}", proxy.counts().faulted);

    // Lineage, by the lease table: parents at SHARD_END, children naming them by their own stream's keys.
    let table = leases(&aws.dynamodb, &application).await;
    let key_of = |stream: &TestStream, shard: &str| table.iter().find(|l| stream_of(l.key.as_str()) == stream.name && l.key.shard_id() == shard).map(|l| l.key.to_string()).unwrap_or_else(|| panic!("no lease of {}/{shard}", stream.name));
    let parents = [key_of(&a, &a_parent), key_of(&b, &b_parents[0]), key_of(&b, &b_parents[1])];
    for parent in &parents {
        assert_eq!(lease(&table, parent).checkpoint, Checkpoint::ShardEnd, "{parent}");
    }
    for child in table.iter().filter(|l| !l.parents.is_empty()) {
        let stream = stream_of(child.key.as_str());
        assert!(child.parents.iter().all(|p| stream_of(p) == stream && parents.contains(p)), "{} names {:?}", child.key, child.parents);
    }
    // In each worker's log, a child's first record after its parents' last.
    for log in [&before_kill, &by_second] {
        for child in table.iter().filter(|l| !l.parents.is_empty()) {
            let Some(first) = log.iter().position(|d| d.shard == child.key.as_str()) else { continue };
            assert!(!log[first..].iter().any(|d| child.parents.contains(&d.shard)), "a record of a parent of {} after the child's first", child.key);
        }
    }
    let (exit, log) = second.interrupt().await;
    assert!(exit.success(), "{exit:?}; the worker's log:\n{}", log.join("\n"));
}
