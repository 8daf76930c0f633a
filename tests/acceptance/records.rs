//! What a processor is given: KPL aggregates across restarts, and reading
//! with enhanced fan-out.

use super::*;

/// Puts one KPL aggregate of `users` user records (`<prefix>-<i>`) on `shard`.
async fn put_aggregate(stream: &TestStream, shard: &str, prefix: &str, users: usize) -> (String, Vec<String>) {
    let payloads: Vec<String> = payloads(prefix, users);
    let aggregate = kcl_host::records::kpl::encode(payloads.iter().map(|p| ("user-key", None, p.as_bytes())));
    let seq = stream.put_keyed(shard, &[(&aggregate, "aggregate-key")]).await.pop().unwrap();
    (seq, payloads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_inside_a_kpl_aggregate_skips_nothing_and_repeats_nothing() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("kpl"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    // 150 user records in one Kinesis record: the counter checkpoints after
    // the 100th, inside the aggregate.
    let (seq, users) = put_aggregate(&stream, &shard, "u", 150).await;
    let application = unique("kpl-app");
    let mut first = start("counter", &stream.name, &application, "worker-1");
    first.wait_for("all 150 user records", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 150).await;
    let delivered: Vec<String> = first.delivered().await.into_iter().map(|d| d.data).collect();
    assert_eq!(delivered, users, "each user record once, in order");
    first.kill().await;
    let checkpoint = lease(&leases(&aws.dynamodb, &application).await, &shard).checkpoint.clone();
    assert_eq!(checkpoint, Checkpoint::At(kcl_host::records::Position::new(&seq, 99).unwrap()), "sub-record 99 of the aggregate");

    let mut second = start_with("counter", &stream.name, &application, "worker-2", &["--failover-time", "1s"]);
    second.wait_for("the rest of the aggregate", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 50).await;
    let again: Vec<String> = second.delivered().await.into_iter().map(|d| d.data).collect();
    let (status, log) = second.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(again, users[100..], "from user record 100 on: nothing skipped, nothing before it again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_checkpoint_at_the_first_user_record_keeps_the_rest_of_the_aggregate() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("kpl-java"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let (seq, users) = put_aggregate(&stream, &shard, "j", 5).await;
    stream.put(&shard, &["after".to_owned()]).await;
    // Java KCL writes `checkpoint` = the aggregate's sequence number and
    // `checkpointSubSequenceNumber` = 0 after processing its first user record.
    let application = unique("kpl-java-app");
    let row = Lease {
        checkpoint: Checkpoint::parse(&seq, 0).unwrap(),
        ..Lease::new(shard.clone(), Checkpoint::TrimHorizon, BTreeSet::new())
    };
    write_leases(&aws.dynamodb, &application, &[row]).await;
    let mut host = start("counter", &stream.name, &application, "worker-1");
    host.wait_for("the rest", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(" after "))).await;
    let delivered: Vec<String> = host.delivered().await.into_iter().map(|d| d.data).collect();
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let mut expected = users[1..].to_vec();
    expected.push("after".into());
    assert_eq!(delivered, expected, "user records 1..4 of the aggregate, then the next record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enhanced_fan_out_delivers_every_record_of_every_shard_in_order() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("fanout"), 4).await;
    let mut expected = BTreeMap::new();
    for shard in stream.shards().await {
        let records = payloads(&shard.id, 25);
        stream.put(&shard.id, &records).await;
        expected.insert(shard.id, records);
    }
    let application = unique("fanout-app");
    let mut host = start_with("counter", &stream.name, &application, "worker-1", &["--retrieval", "fanout"]);
    host.wait_for("all 100 records", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 100).await;
    let delivered = host.delivered().await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "reading with enhanced fan-out"), 1, "{}", log.join("\n"));
    assert_eq!(by_shard(&delivered), expected, "each shard's records once, in order");
}
