//! DynamoDB Streams as a source: a table on moto with its stream on, a
//! steady writer of puts, updates and deletes, and `kcl-host run` workers
//! of the `table-totals` example killed (-9) and stopped (SIGTERM) under it.
//! Judged from the state table: each partition key's total equals the sum
//! of its items' amounts in the table, each item's last-seen amount equals
//! the table's, and no change was seen out of order (`gaps/*`); from the
//! lease table: the stream's shard ids with sequence-number checkpoints, as
//! the DynamoDB Streams Kinesis Adapter writes them.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, StreamViewType};
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use kcl_testkit::faults::{Fault, FaultProxy, Rule};
use kcl_testkit::tables::{table_with_stream, table_with_stream_of};
use kcl_testkit::{at_or_before, java_kcl3, StreamRecord};
use tokio::sync::watch;

use super::faults::faults_applied;
use super::outputs::{all_forwarded, behind_checkpoint, checkpoints, data, forwarded, until};
use super::state::another_version;
use super::*;

/// Writes puts, updates and deletes to `table` until stopped; keeps what the table holds.
struct Writer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<BTreeMap<(String, i64), i64>>,
}

impl Writer {
    fn start(aws: &AwsClients, table: &str, keys: usize) -> Self {
        let (dynamodb, table) = (aws.dynamodb.clone(), table.to_owned());
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut items: BTreeMap<(String, i64), i64> = BTreeMap::new();
            let mut next_sk = 0;
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            loop {
                tokio::select! {
                    _ = stopped.changed() => return items,
                    _ = tick.tick() => {}
                }
                let existing: Vec<(String, i64)> = items.keys().cloned().collect();
                let amount = fastrand::i64(1..1000);
                let (pk, sk, write) = match fastrand::u8(..10) {
                    0..=4 if !existing.is_empty() => {
                        let (pk, sk) = existing[fastrand::usize(..existing.len())].clone();
                        (pk, sk, Some(amount))
                    }
                    5 if !existing.is_empty() => {
                        let (pk, sk) = existing[fastrand::usize(..existing.len())].clone();
                        (pk, sk, None)
                    }
                    _ => {
                        next_sk += 1;
                        (format!("account-{}", fastrand::usize(..keys)), next_sk, Some(amount))
                    }
                };
                let key = HashMap::from([("pk".to_owned(), AttributeValue::S(pk.clone())), ("sk".to_owned(), AttributeValue::N(sk.to_string()))]);
                match write {
                    Some(amount) => {
                        let mut item = key;
                        item.insert("amount".into(), AttributeValue::N(amount.to_string()));
                        dynamodb.put_item().table_name(&table).set_item(Some(item)).send().await.expect("PutItem");
                        items.insert((pk, sk), amount);
                    }
                    None => {
                        dynamodb.delete_item().table_name(&table).set_key(Some(key)).send().await.expect("DeleteItem");
                        items.remove(&(pk, sk));
                    }
                }
            }
        });
        Writer { stop, task }
    }

    /// Stops writing; what the table holds: each item's amount.
    async fn stop(self) -> BTreeMap<(String, i64), i64> {
        self.stop.send_replace(true);
        self.task.await.expect("the writer does not panic")
    }
}

/// Every value of the state table written for `stream`, by key.
async fn state_values(aws: &AwsClients, application: &str, stream: &str) -> BTreeMap<String, i64> {
    let scan = aws.dynamodb.scan().table_name(format!("{application}-KclHostState")).consistent_read(true).send().await;
    let Ok(scan) = scan else { return BTreeMap::new() };
    let text = |item: &HashMap<String, AttributeValue>, name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    scan.items()
        .iter()
        .filter(|item| !item.contains_key("log") && text(item, "stream") == stream)
        .filter_map(|item| {
            let value = item.get("value")?.as_b().ok()?;
            Some((text(item, "key"), std::str::from_utf8(value.as_ref()).ok()?.parse().ok()?))
        })
        .collect()
}

/// What `table-totals` should hold for `items`: each item's amount and each key's total.
fn expected_state(items: &BTreeMap<(String, i64), i64>) -> BTreeMap<String, i64> {
    let mut state = BTreeMap::new();
    for ((pk, sk), amount) in items {
        state.insert(format!("item/{pk}/{sk}"), *amount);
        *state.entry(format!("total/{pk}")).or_default() += amount;
    }
    state
}

fn worker(arn: &str, application: &str, id: &str) -> KclHost {
    let endpoint = java_kcl3::dynamodb_endpoint();
    start_with_env("table-totals", arn, application, id, &["--failover-time", "2s"], &[("AWS_ENDPOINT_URL_DYNAMODB", &endpoint)])
}

#[tokio::test(flavor = "multi_thread")]
async fn every_change_of_a_table_is_summed_exactly_once_through_a_kill_and_a_sigterm() {
    let aws = java_kcl3::clients().await;
    let table = unique("orders");
    let arn = table_with_stream(&aws.dynamodb, &table).await;
    let application = unique("cdc-app");
    let writer = Writer::start(&aws, &table, 6);
    let mut first = worker(&arn, &application, "worker-1");
    first.wait_for("changes committed", LIMIT, |log| count_lines(log, "committed ") >= 3).await;
    let mut second = worker(&arn, &application, "worker-2");
    first.kill().await;
    second.wait_for("the killed worker's shard taken over", LIMIT, |log| count_lines(log, "committed ") >= 3).await;
    let third = worker(&arn, &application, "worker-3");
    let (exit, log) = second.interrupt().await;
    assert!(exit.success(), "the second worker stops cleanly on SIGTERM: {}", log.join("\n"));
    let items = writer.stop().await;
    assert!(items.len() > 10, "the writer wrote: {items:?}");
    let expected = expected_state(&items);
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut state = state_values(&aws, &application, &arn).await;
    while state != expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        state = state_values(&aws, &application, &arn).await;
    }
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(key, value)| state.get(*key) != Some(value))
        .map(|(key, value)| format!("{key}: {:?} in state, {value} in the table", state.get(key)))
        .chain(state.keys().filter(|key| !expected.contains_key(*key)).map(|key| format!("{key} = {} should not be there", state[key])))
        .collect();
    assert!(wrong.is_empty(), "{} state values differ from the table: {:?}", wrong.len(), &wrong[..wrong.len().min(10)]);
    // The leases: the stream's shard ids, checkpointed at sequence numbers.
    let described = aws.dynamodb_streams.describe_stream().stream_arn(&arn).send().await.expect("DescribeStream");
    let shards: BTreeSet<String> = described.stream_description().map(|d| d.shards().iter().filter_map(|s| s.shard_id().map(str::to_owned)).collect()).unwrap_or_default();
    let leases = leases(&aws.dynamodb, &application).await;
    for lease in &leases {
        assert!(matches!(lease.checkpoint, Checkpoint::At(_)), "{} is checkpointed at a sequence number: {:?}", lease.key, lease.checkpoint);
        assert!(shards.contains(lease.key.as_str()), "{} is a shard of the stream ({shards:?})", lease.key);
    }
    let (exit, log) = third.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));
}

/// The changes a worker's log shows (kcl-host's counter example or the
/// adapter worker): sequence number → the item's partition key value.
fn changes_in(log: &[String]) -> BTreeMap<String, String> {
    log.iter()
        .filter_map(|line| {
            let (_, rest) = ["kcl_host::guest: record ", "java-kcl: record "].iter().find_map(|tag| line.split_once(tag))?;
            let mut parts = rest.splitn(3, ' ');
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

/// Puts `count` items whose partition keys are `<phase>-<n>`; returns those keys.
async fn put_items(aws: &AwsClients, table: &str, phase: &str, count: usize) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for n in 0..count {
        let pk = format!("{phase}-{n}");
        let item = HashMap::from([("pk".to_owned(), AttributeValue::S(pk.clone())), ("sk".to_owned(), AttributeValue::N("1".into())), ("amount".to_owned(), AttributeValue::N(n.to_string()))]);
        aws.dynamodb.put_item().table_name(table).set_item(Some(item)).send().await.expect("PutItem");
        keys.insert(pk);
    }
    keys
}

/// A table's stream handed between kcl-host and a Java worker built on the
/// DynamoDB Streams Kinesis Adapter 2.0.1 (Java KCL 3.1.1), both ways, as
/// the Kinesis mixed-fleet tests do: each takes over from the other's
/// checkpoints (shard-id lease keys, sequence-number checkpoints), so no
/// change is processed twice and none is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_tables_stream_passes_from_kcl_host_to_the_java_adapter_and_back_with_its_checkpoints() {
    let aws = java_kcl3::clients().await;
    let table = unique("handoff");
    let arn = table_with_stream(&aws.dynamodb, &table).await;
    let application = unique("cdc-java-app");
    let endpoint = java_kcl3::dynamodb_endpoint();
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())];
    let flags = ["--failover-time", "4000ms", "--lease-renewal", "per-lease"];
    let keys_seen = |log: &[String], keys: &BTreeSet<String>| {
        let seen: BTreeSet<String> = changes_in(log).into_values().collect();
        seen.is_superset(keys)
    };

    let first = put_items(&aws, &table, "host", 5).await;
    let mut host = start_with_env("counter", &arn, &application, "kcl-host-1", &flags, &env);
    host.wait_for("the first changes", LIMIT, |log| keys_seen(log, &first)).await;
    host.signal(SIGTERM);
    let (exit, host_log) = host.wait_exit(LIMIT).await;
    assert!(exit.success(), "{}", host_log.join("\n"));
    let by_host = changes_in(&host_log);

    let second = put_items(&aws, &table, "java", 5).await;
    let mut java = java_kcl3::spawn_adapter(&arn, &application, "java-1", 4_000);
    java.wait_for("the changes after kcl-host's checkpoints", LIMIT, |log| keys_seen(log, &second)).await;
    java.signal(SIGTERM);
    let (_, java_log) = java.wait_exit(LIMIT).await;
    assert_eq!(count_lines(&java_log, "java-kcl: stopped"), 1, "a graceful stop, checkpointed: {}", java_log.join("\n"));
    let by_java = changes_in(&java_log);
    assert!(by_java.values().all(|pk| second.contains(pk)), "the adapter went on from kcl-host's checkpoints: {by_java:?}");
    assert!(by_java.keys().all(|seq| !by_host.contains_key(seq)), "no change processed twice");

    let third = put_items(&aws, &table, "back", 5).await;
    let mut back = start_with_env("counter", &arn, &application, "kcl-host-2", &flags, &env);
    back.wait_for("the changes after the adapter's checkpoints", LIMIT, |log| keys_seen(log, &third)).await;
    let (exit, back_log) = back.interrupt().await;
    assert!(exit.success(), "{}", back_log.join("\n"));
    let by_back = changes_in(&back_log);
    assert!(by_back.values().all(|pk| third.contains(pk)), "kcl-host went on from the adapter's checkpoints: {by_back:?}");
    assert_eq!(by_host.len() + by_java.len() + by_back.len(), 15, "each change once: {by_host:?} {by_java:?} {by_back:?}");

    // One lease table: the stream's shard ids, checkpointed at sequence numbers by whoever held them last.
    for lease in leases(&aws.dynamodb, &application).await {
        assert!(lease.key.as_str().starts_with("shardId-"), "{}", lease.key);
        assert!(matches!(lease.checkpoint, Checkpoint::At(_) | Checkpoint::ShardEnd), "{}: {:?}", lease.key, lease.checkpoint);
    }
}

/// A processor that reads new images (`--needs-images new`) is refused on a
/// table whose stream carries keys only, before anything is created, with
/// the way to a stream that has them; on a stream that has them it runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_processor_needing_images_is_refused_on_a_keys_only_stream_with_the_fix() {
    let aws = java_kcl3::clients().await;
    let (keys_only, images) = (unique("keys-only"), unique("images"));
    table_with_stream_of(&aws.dynamodb, &keys_only, StreamViewType::KeysOnly).await;
    let arn = table_with_stream_of(&aws.dynamodb, &images, StreamViewType::NewImage).await;
    let application = unique("needs-images-app");
    let endpoint = java_kcl3::dynamodb_endpoint();
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())];
    let counter = guest("counter");
    let args = ["run", &counter, "--dynamodb-table", &keys_only, "--application", &application, "--needs-images", "new"];
    let (code, text) = run_to_exit(&args, &env).await;
    assert!(code != 0, "{text}");
    assert!(text.contains(&format!("the stream of table `{keys_only}` carries KEYS_ONLY records")) && text.contains("StreamViewType=NEW_IMAGE"), "{text}");
    let tables = aws.dynamodb.list_tables().send().await.expect("ListTables");
    assert!(!tables.table_names().contains(&application), "no lease table is made for a refused start");

    put_items(&aws, &images, "new", 1).await;
    let mut worker = start_with_env("counter", &arn, &application, "worker-1", &["--needs-images", "new"], &env);
    worker.wait_for("the change", LIMIT, |log| changes_in(log).values().any(|pk| pk == "new-0")).await;
    let (exit, log) = worker.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));
}

/// Every change the stream holds, read from the test's side: what the
/// workers must deliver (`partition_key`: the item's `pk`).
async fn stream_records(aws: &AwsClients, arn: &str) -> Vec<StreamRecord> {
    let streams = &aws.dynamodb_streams;
    let described = streams.describe_stream().stream_arn(arn).send().await.expect("DescribeStream");
    let mut records = Vec::new();
    for shard in described.stream_description().map(|d| d.shards()).unwrap_or_default() {
        let id = shard.shard_id().unwrap_or_default();
        let start = streams.get_shard_iterator().stream_arn(arn).shard_id(id).shard_iterator_type(ShardIteratorType::TrimHorizon);
        let mut iterator = start.send().await.expect("GetShardIterator").shard_iterator;
        while let Some(current) = iterator {
            let page = streams.get_records().shard_iterator(current).send().await.expect("GetRecords");
            if page.records().is_empty() {
                break;
            }
            for change in page.records().iter().filter_map(|r| r.dynamodb()) {
                let pk = change.keys().and_then(|k| k.get("pk")).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                let sequence_number = change.sequence_number().unwrap_or_default().to_owned();
                records.push(StreamRecord { shard: id.to_owned(), data: format!("{pk} {sequence_number}"), sequence_number, partition_key: pk });
            }
            iterator = page.next_shard_iterator;
        }
    }
    records
}

/// Where a worker's log breaks an item key's order: per processor version
/// (a swap hands the records after the checkpoint to the new one), a
/// change logged at or before one of its key logged earlier.
fn key_order_breaks(log: &[String]) -> Vec<String> {
    let mut last: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut breaks = Vec::new();
    for line in log {
        let (Some(d), Some((_, rest))) = (kcl_testkit::process::parse_delivered(line), line.split_once("kcl_host::guest: record ")) else { continue };
        let pk = rest.split(' ').nth(1).unwrap_or_default().to_owned();
        if let Some(previous) = last.insert((d.processor.clone(), pk.clone()), d.sequence_number.clone())
            && at_or_before(&d.sequence_number, &previous)
        {
            breaks.push(format!("{pk}: {} after {previous} ({})", d.sequence_number, d.processor));
        }
    }
    breaks
}

/// `--parallelism 4` on a table's stream (lanes by the item's partition
/// key), the `forward` guest's outputs to a Kinesis stream, GetRecords
/// failing (500s, throttling, an expired iterator, reset connections)
/// through the fault proxy in front of DynamoDB Streams, a hot swap
/// (`POST /swap`) and a kill -9, under a steady writer: every change
/// delivered and forwarded, each item key's changes in order, duplicates
/// only after the checkpoint at the kill or across the swap, no output
/// ever behind its checkpoint, and after the swap only the new version.
#[tokio::test(flavor = "multi_thread")]
async fn changes_pass_four_instances_a_faulty_stream_a_swap_and_a_kill_in_each_items_order() {
    let aws = java_kcl3::clients().await;
    let table = unique("par-orders");
    let arn = table_with_stream(&aws.dynamodb, &table).await;
    let (application, output) = (unique("cdc-par-app"), TestStream::create(&aws.kinesis, &unique("cdc-out"), 1).await);
    let proxy = FaultProxy::start(&std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS").expect("moto's DynamoDB Streams")).await;
    let fail = |fault, times| Rule { operation: Some("GetRecords"), table: None, body_contains: None, fault, times: Some(times) };
    proxy.set(vec![
        fail(Fault::Fail(500, "InternalServerError"), 3),
        fail(Fault::Fail(400, "LimitExceededException"), 3),
        fail(Fault::Fail(400, "ExpiredIteratorException"), 2),
        fail(Fault::Reset, 2),
    ]);
    let (dynamodb, target, admin) = (java_kcl3::dynamodb_endpoint(), format!("out=kinesis:{}", output.name), admin_address());
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.as_str()), ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", proxy.endpoint.as_str())];
    let flags = ["--parallelism", "4", "--max-records", "100", "--var", "pause-ms=5", "--output", &target, "--failover-time", "4s"];
    let writer = Writer::start(&aws, &table, 8);

    let mut first = start_with_env("forward", &arn, &application, "w1", &[&flags[..], &["--admin-listen", &admin]].concat(), &env);
    first.wait_for("changes through the faults", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 40).await;
    faults_applied(&proxy, 10).await;
    let v1 = delivered(&first.log().await)[0].processor.clone();
    let (status, body) = http(&admin, "POST", "/swap", "application/wasm", &another_version("forward")).await;
    assert!(status.contains("200"), "{status}: {body}");
    let new_version = |log: &[String]| delivered(log).iter().filter(|d| d.processor != v1).count();
    first.wait_for("changes by the new version", LIMIT, |log| new_version(log) >= 20).await;
    // Killed once a checkpoint covers changes the new version processed.
    let first_new = delivered(&first.log().await).into_iter().find(|d| d.processor != v1).expect("the new version ran").sequence_number;
    until("a checkpoint past the swap", || async { checkpoints(&aws, &application).await.values().any(|cp| at_or_before(&first_new, cp)) }).await;
    // Read the checkpoints, then the outputs: every change they cover was forwarded.
    let at_kill = checkpoints(&aws, &application).await;
    let forwarded_then = forwarded(&data(&output.read_all().await));
    let first_log = first.kill().await;
    let before_kill = stream_records(&aws, &arn).await;
    let ahead = behind_checkpoint(&before_kill, &at_kill, &forwarded_then);
    assert!(ahead.is_empty(), "a checkpoint was ahead of its outputs: {ahead:?}");

    let mut second = start_with_env("forward", &arn, &application, "w2", &flags, &env);
    second.wait_for("changes after the kill", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 20).await;
    writer.stop().await;
    let inputs = stream_records(&aws, &arn).await;
    all_forwarded(&inputs, &output, &aws, &application, &second).await;
    let (exit, second_log) = second.interrupt().await;
    assert!(exit.success(), "{}", second_log.join("\n"));

    for (worker, log) in [("w1", &first_log), ("w2", &second_log)] {
        let breaks = key_order_breaks(log);
        assert!(breaks.is_empty(), "{worker} broke an item's order: {breaks:?}");
    }
    let (before, after) = (delivered(&first_log), delivered(&second_log));
    let swapped_at = before.iter().position(|d| d.processor != v1).expect("the new version ran");
    assert!(before[swapped_at..].iter().all(|d| d.processor != v1), "the old version ran after the new one");
    let mut times: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for d in before.iter().chain(&after) {
        times.entry(d.sequence_number.as_str()).or_default().push(&d.processor);
    }
    let missing: Vec<&StreamRecord> = inputs.iter().filter(|r| !times.contains_key(r.sequence_number.as_str())).collect();
    assert!(missing.is_empty(), "{} of {} changes never delivered: {missing:?}", missing.len(), inputs.len());
    let checkpoint = &at_kill[&inputs[0].shard];
    for (seq, by) in &times {
        let across_swap = by.len() == 2 && by[0] == v1 && by[1] != v1;
        assert!(by.len() == 1 || across_swap || !at_or_before(seq, checkpoint), "{seq} came {} times though the checkpoint at the kill covered it", by.len());
    }
    let outs = forwarded(&data(&output.read_all().await));
    assert!(behind_checkpoint(&inputs, &checkpoints(&aws, &application).await, &outs).is_empty());
    let covered = inputs.iter().filter(|r| at_or_before(&r.sequence_number, checkpoint)).count();
    let twice = times.values().filter(|by| by.len() > 1).count();
    eprintln!("{} changes, {covered} covered by the checkpoint at the kill, {twice} delivered more than once, {} faults", inputs.len(), proxy.counts().faulted);
}

/// The failure policy on a table's stream: a change the processor traps
/// on (its new image has `poison` = `trap`) is bisected out of its batch
/// and goes alone to the dead letters, in the envelope Kinesis records get,
/// with the change's JSON as its data; every other change is forwarded and
/// the checkpoint passes them all.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_the_processor_traps_on_goes_alone_to_the_dead_letters() {
    use base64::Engine as _;
    let aws = java_kcl3::clients().await;
    let table = unique("poison");
    let arn = table_with_stream(&aws.dynamodb, &table).await;
    let application = unique("cdc-dlq-app");
    let output = TestStream::create(&aws.kinesis, &unique("cdc-out"), 1).await;
    let dlq = TestStream::create(&aws.kinesis, &unique("cdc-dlq"), 1).await;
    put_items(&aws, &table, "before", 12).await;
    let poison = HashMap::from([
        ("pk".to_owned(), AttributeValue::S("poisoned".into())),
        ("sk".to_owned(), AttributeValue::N("1".into())),
        ("poison".to_owned(), AttributeValue::S("trap".into())),
    ]);
    aws.dynamodb.put_item().table_name(&table).set_item(Some(poison)).send().await.expect("PutItem");
    put_items(&aws, &table, "after", 7).await;
    let inputs = stream_records(&aws, &arn).await;
    let (poisoned, others): (Vec<StreamRecord>, Vec<StreamRecord>) = inputs.iter().cloned().partition(|r| r.partition_key == "poisoned");
    assert_eq!((poisoned.len(), others.len()), (1, 19), "{inputs:?}");

    let (dynamodb, target, on_failure) = (java_kcl3::dynamodb_endpoint(), format!("out=kinesis:{}", output.name), format!("kinesis:{}", dlq.name));
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.as_str())];
    let flags = ["--output", &target, "--on-failure", &on_failure, "--bisect-on-error", "--max-retry-attempts", "1", "--retry-backoff", "100ms"];
    let worker = start_with_env("forward", &arn, &application, "w1", &flags, &env);
    all_forwarded(&others, &output, &aws, &application, &worker).await;
    let last = &inputs.last().expect("20 changes").sequence_number;
    until("the checkpoint at the last change", || async { checkpoints(&aws, &application).await.values().any(|cp| at_or_before(last, cp)) }).await;
    let (exit, log) = worker.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));

    let letters: Vec<serde_json::Value> = dlq.read_all().await.iter().map(|r| serde_json::from_str(&r.data).expect("an envelope is JSON")).collect();
    assert_eq!(letters.len(), 1, "only the poisoned change is given up on: {letters:?}");
    let letter = &letters[0];
    assert_eq!(letter["sequence_number"], poisoned[0].sequence_number.as_str());
    assert_eq!((letter["partition_key"].as_str(), letter["stream"].as_str()), (Some("poisoned"), Some(arn.as_str())));
    assert_eq!(letter["condition"], "RetryAttemptsExhausted");
    let data = base64::engine::general_purpose::STANDARD.decode(letter["data"].as_str().expect("the change is in the envelope")).expect("base64");
    let change: serde_json::Value = serde_json::from_slice(&data).expect("the change's JSON");
    assert_eq!((change["eventName"].as_str(), change["dynamodb"]["NewImage"]["poison"]["S"].as_str()), (Some("INSERT"), Some("trap")), "{change}");
    let outs = forwarded(&super::outputs::data(&output.read_all().await));
    assert!(!outs.keys().any(|(_, seq)| *seq == poisoned[0].sequence_number), "the poisoned change was not forwarded");
}
