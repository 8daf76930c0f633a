//! `--parallelism`: one shard processed by several instances at once, each
//! partition key's records in order by one of them, and the checkpoint the
//! host writes where every record below is done. Judged from the logs (which
//! instance count ran, each key's order), the lease table and the output
//! stream.

use kcl_testkit::at_or_before;

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

/// Keys whose records one worker's log shows out of order.
fn out_of_order(delivered: &[Delivered]) -> Vec<String> {
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for d in delivered {
        let (key, n) = key_and_index(&d.data);
        if let Some(previous) = last.insert(key, n).filter(|previous| *previous >= n) {
            wrong.push(format!("{key}: {n} after {previous}"));
        }
    }
    wrong
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
    let (status, second_log) = second.interrupt().await;
    assert!(status.success(), "{}", second_log.join("\n"));

    let (before, after) = (delivered(&first_log), delivered(&second_log));
    for (worker, records) in [("w1", &before), ("w2", &after)] {
        assert!(out_of_order(records).is_empty(), "{worker} broke a key's order: {:?}", out_of_order(records));
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
