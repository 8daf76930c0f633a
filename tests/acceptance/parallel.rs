//! `--parallelism`: one shard processed by several instances at once, each
//! partition key's records in order by one of them, and the checkpoint the
//! host writes where every record below is done. Judged from the logs (which
//! instance count ran, each key's order), the lease table and the output
//! stream.

use kcl_testkit::at_or_before;
use kcl_testkit::faults::{Fault, FaultProxy, Rule};

use super::faults::upstream;
use super::outputs::{all_forwarded, behind_checkpoint, checkpoints, data, forwarded};
use super::*;

/// 16 keys, `per_key` records each, interleaved as a producer would write
/// them: data `k<key>/<n>`, partition key `key-<key>`.
async fn sixteen_keys(stream: &TestStream, per_key: usize) {
    let records: Vec<(String, String)> = (0..per_key).flat_map(|n| (0..16).map(move |k| (format!("k{k}/{n}"), format!("key-{k}")))).collect();
    let borrowed: Vec<(&[u8], &str)> = records.iter().map(|(d, k)| (d.as_bytes(), k.as_str())).collect();
    stream.put_by_key(&borrowed).await;
}

/// `(key, n)` of a `k<key>/<n>` record.
fn key_and_index(data: &str) -> (&str, usize) {
    let (key, n) = data.split_once('/').expect("k<key>/<n>");
    (key, n.parse().expect("a record number"))
}

/// Where one worker's log breaks a key's order: a record whose
/// predecessor it had not delivered yet (reordered, or skipped ahead), or —
/// unless `retried` (a failed call's records come again) — one it
/// delivered before. A key starts wherever the worker first saw it.
fn order_breaks(delivered: &[Delivered], retried: bool) -> Vec<String> {
    let mut furthest: BTreeMap<&str, usize> = BTreeMap::new();
    let mut breaks = Vec::new();
    for d in delivered {
        let (key, n) = key_and_index(&d.data);
        match furthest.get(key).copied() {
            Some(max) if n > max + 1 => breaks.push(format!("{key}: {n} before {}", max + 1)),
            Some(max) if n <= max && !retried => breaks.push(format!("{key}: {n} again after {max}")),
            _ => {}
        }
        let max = furthest.entry(key).or_insert(n);
        *max = (*max).max(n);
    }
    breaks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_instances_keep_each_keys_order_and_a_kill_9_loses_nothing_nor_passes_an_output() {
    let aws = clients().await;
    let (input, output, application) = (unique("par-in"), unique("par-out"), unique("par-app"));
    let input = TestStream::create(&aws.kinesis, &input, 1).await;
    let output = TestStream::create(&aws.kinesis, &output, 1).await;
    sixteen_keys(&input, 60).await;
    let (target, admin) = (format!("out=kinesis:{}", output.name), admin_address());
    // Calls of 10 records that each wait 20 ms: a backlog one instance
    // would take ~2 s of waiting alone to drain.
    let flags = ["--parallelism", "8", "--max-records", "10", "--var", "pause-ms=20", "--output", &target, "--failover-time", "4s"];
    let first = start_with("forward", &input.name, &application, "w1", &[&flags[..], &["--admin-listen", &admin]].concat());
    // The calls in flight, as /metrics shows them while the backlog drains.
    let (mut in_flight, deadline) = (0f64, tokio::time::Instant::now() + LIMIT);
    while count_lines(&first.log().await, "kcl_host::guest: record ") < 320 {
        assert!(tokio::time::Instant::now() < deadline, "a third of the records not delivered after {LIMIT:?}");
        if tokio::net::TcpStream::connect(&admin).await.is_ok() {
            let (_, metrics) = http_get(&admin, "/metrics").await;
            in_flight = in_flight.max(series(&metrics, "kcl_host_calls_in_flight", None).unwrap_or(0.0));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(in_flight > 1.0, "calls ran side by side on the one shard (at most {in_flight} seen in flight)");
    // Read the checkpoint, then the outputs: every record it covers has its output.
    let cps = checkpoints(&aws, &application).await;
    let outs = forwarded(&data(&output.read_all().await));
    let inputs = input.read_all().await;
    let missing = behind_checkpoint(&inputs, &cps, &outs);
    assert!(missing.is_empty(), "the checkpoint is ahead of outputs: {missing:?}");
    let first_log = first.log().await;
    first.kill().await;
    // What a duplicate may only follow: the checkpoint the killed worker left.
    let at_kill = checkpoints(&aws, &application).await;
    assert!(!at_kill.is_empty(), "the host checkpointed while the instances ran");

    let second = start_with("forward", &input.name, &application, "w2", &flags);
    all_forwarded(&inputs, &output, &aws, &application, &second).await;
    // The worker's heartbeat tells `status` (it beats every third of the failover time).
    let shard = &inputs[0].shard;
    outputs::until("status showing the shard's instances", || async {
        run_to_exit(&["status", "--application", &application], &[]).await.1.contains(&format!("{shard} 8 instances: "))
    })
    .await;
    let (status, second_log) = second.interrupt().await;
    assert!(status.success(), "{}", second_log.join("\n"));

    let (before, after) = (delivered(&first_log), delivered(&second_log));
    for (worker, records) in [("w1", &before), ("w2", &after)] {
        assert!(order_breaks(records, false).is_empty(), "{worker} broke a key's order: {:?}", order_breaks(records, false));
    }
    let counts = delivery_counts(before.iter().chain(&after));
    assert_eq!(counts.len(), inputs.len(), "every record delivered");
    let cp = &at_kill[&inputs[0].shard];
    for record in &inputs {
        let (times, _) = counts[record.data.as_str()];
        if times > 1 {
            assert!(!at_or_before(&record.sequence_number, cp), "{} came twice though the checkpoint at the kill covered it", record.data);
        }
    }
    assert!(after.iter().all(|d| !at_or_before(&d.sequence_number, cp)), "the second worker started after the checkpoint");
    let outs = forwarded(&data(&output.read_all().await));
    assert!(behind_checkpoint(&inputs, &checkpoints(&aws, &application).await, &outs).is_empty());
    eprintln!(
        "{} records, {} delivered twice (after the checkpoint at the kill), up to {in_flight} calls in flight",
        inputs.len(),
        counts.values().filter(|(n, _)| *n > 1).count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kpl_user_records_keep_their_keys_order_across_four_instances_a_kill_inside_an_aggregate_skips_nothing_and_a_poison_record_goes_alone() {
    const AGGREGATES: usize = 24;
    let aws = clients().await;
    let (input, output, dlq, application) = (unique("par-kpl"), unique("par-kpl-out"), unique("par-kpl-dlq"), unique("par-kpl-app"));
    let input = TestStream::create(&aws.kinesis, &input, 1).await;
    let output = TestStream::create(&aws.kinesis, &output, 1).await;
    let dlq = TestStream::create(&aws.kinesis, &dlq, 1).await;
    let shard = input.shards().await[0].id.clone();
    // Each aggregate: one user record of each of 16 keys; aggregate 9 has a
    // 17th, a poison record of its own key (it traps).
    let mut positions: BTreeMap<String, kcl_host::records::Position> = BTreeMap::new();
    for a in 0..AGGREGATES {
        let mut users: Vec<(String, String)> = (0..16).map(|k| (format!("key-{k}"), format!("k{k}/{a}"))).collect();
        if a == 9 {
            users.push(("key-poison".into(), "trap".into()));
        }
        let aggregate = kcl_host::records::kpl::encode(users.iter().map(|(key, data)| (key.as_str(), None, data.as_bytes())));
        let seq = input.put_keyed(&shard, &[(&aggregate, "aggregate")]).await.pop().unwrap();
        for (sub, (_, data)) in users.iter().enumerate() {
            positions.insert(data.clone(), kcl_host::records::Position::new(&seq, sub as u64).unwrap());
        }
    }
    let (target, on_failure) = (format!("out=kinesis:{}", output.name), format!("kinesis:{}", dlq.name));
    #[rustfmt::skip]
    let flags = [
        "--parallelism", "4", "--max-records", "8", "--var", "pause-ms=10", "--output", &target, "--on-failure", &on_failure,
        "--bisect-on-error", "--max-retry-attempts", "1", "--retry-backoff", "100ms", "--failover-time", "4s",
    ];
    let mut first = start_with("forward", &input.name, &application, "w1", &flags);
    first.wait_for("a third of the user records", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 128).await;
    outputs::until("a checkpoint", || async { lease(&leases(&aws.dynamodb, &application).await, &shard).checkpoint.has_started() }).await;
    let first_log = first.log().await;
    first.kill().await;
    let at_kill = lease(&leases(&aws.dynamodb, &application).await, &shard).checkpoint.clone();
    let Checkpoint::At(at_kill) = at_kill else { panic!("checkpointed inside the stream, not {at_kill:?}") };

    let second = start_with("forward", &input.name, &application, "w2", &flags);
    let expected = positions.len() - 1;
    outputs::until("every user record but the poison one forwarded", || async {
        let outs: BTreeSet<String> = data(&output.read_all().await).iter().filter_map(|l| Some(l.splitn(3, ' ').nth(2)?.to_owned())).collect();
        outs.len() >= expected
    })
    .await;
    outputs::until("the poison record's dead letter", || async { !dlq.read_all().await.is_empty() }).await;
    let (status, second_log) = second.interrupt().await;
    assert!(status.success(), "{}", second_log.join("\n"));

    // The poison record alone; a second time only if the kill came before a
    // checkpoint past its first dead letter.
    let letters = dlq.read_all().await;
    for letter in &letters {
        let letter: serde_json::Value = serde_json::from_str(&letter.data).expect("a JSON envelope");
        assert_eq!((&letter["sequence_number"], &letter["sub_sequence_number"]), (&positions["trap"].sequence_number().into(), &16.into()), "{letter}");
    }
    assert!(letters.len() == 1 || positions["trap"] > at_kill, "{} dead letters for one poison record checkpointed before the kill", letters.len());
    let (before, after) = (delivered(&first_log), delivered(&second_log));
    for (worker, records) in [("w1", &before), ("w2", &after)] {
        let records: Vec<Delivered> = records.iter().filter(|d| d.data != "trap").cloned().collect();
        assert!(order_breaks(&records, true).is_empty(), "{worker} broke a key's order: {:?}", order_breaks(&records, true));
    }
    let counts = delivery_counts(before.iter().chain(&after));
    // The poison record traps before the guest logs it: its dead letter is its delivery.
    for (data, position) in positions.iter().filter(|(data, _)| *data != "trap") {
        assert!(counts.contains_key(data.as_str()), "{data} never delivered");
        let again = after.iter().any(|d| d.data == *data);
        assert!(!again || *position > at_kill, "{data} (at {position}) came again though the checkpoint at the kill ({at_kill}) covers it");
    }
    eprintln!("checkpoint at the kill: {at_kill}; {} user records delivered again after it", after.iter().filter(|d| before.iter().any(|b| b.data == d.data)).count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_per_shard_ride_out_failing_and_slow_checkpoint_writes_and_failing_reads_delivering_each_record_once() {
    let aws = clients().await;
    let (input, output, application) = (unique("par-faults"), unique("par-faults-out"), unique("par-faults-app"));
    let input = TestStream::create(&aws.kinesis, &input, 1).await;
    let output = TestStream::create(&aws.kinesis, &output, 1).await;
    sixteen_keys(&input, 40).await;
    let inputs = input.read_all().await;
    // Reads are throttled, then fail; later the host's checkpoint writes
    // fail, then two are slow.
    let (kinesis, dynamodb) = (FaultProxy::start(&upstream("KINESIS")).await, FaultProxy::start(&upstream("DYNAMODB")).await);
    let lease_table = format!(r#""TableName":"{application}""#);
    let fail = |operation, fault, times| Rule { table: None, operation: Some(operation), body_contains: None, fault, times: Some(times) };
    kinesis.set(vec![
        fail("GetRecords", Fault::Fail(400, "ProvisionedThroughputExceededException"), 3),
        fail("GetRecords", Fault::Fail(500, "InternalFailure"), 3),
    ]);
    let env = [("AWS_ENDPOINT_URL_KINESIS", kinesis.endpoint.as_str()), ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.endpoint.as_str())];
    let target = format!("out=kinesis:{}", output.name);
    let flags = ["--parallelism", "4", "--max-records", "10", "--var", "pause-ms=10", "--output", &target, "--failover-time", "4s"];
    let mut worker = start_with_env("forward", &input.name, &application, "w1", &flags, &env);
    // Once it processes, the lease table's writes are the host's checkpoints.
    worker.wait_for("the first records", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 40).await;
    dynamodb.set(vec![
        Rule { table: None, body_contains: Some(lease_table.clone()), ..fail("UpdateItem", Fault::Fail(500, "InternalFailure"), 12) },
        Rule { table: None, body_contains: Some(lease_table), ..fail("UpdateItem", Fault::Delay(Duration::from_millis(1500)), 2) },
    ]);
    all_forwarded(&inputs, &output, &aws, &application, &worker).await;
    let last = inputs.last().unwrap();
    outputs::until("the checkpoint at the last record", || async {
        checkpoints(&aws, &application).await.get(&last.shard) == Some(&last.sequence_number)
    })
    .await;
    assert!(dynamodb.counts().faulted >= 14 && kinesis.counts().faulted >= 6, "every fault was applied");
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let delivered = delivered(&log);
    assert!(order_breaks(&delivered, false).is_empty(), "{:?}", order_breaks(&delivered, false));
    let counts = delivery_counts(&delivered);
    assert_eq!(counts.len(), inputs.len(), "every record delivered");
    assert!(counts.values().all(|(n, _)| *n == 1), "no record twice: nothing failed in the processor");
    assert!(count_lines(&log, "writing the checkpoint at") >= 1, "a checkpoint write failed and was tried again");
}
