//! Tumbling windows: the `window-totals` example sums cents per user in its
//! state and, as each 3 s window closes, writes every (user, window) total
//! to a DynamoDB table and deletes the user's state. Judged from the table
//! and the stream: each total equals the sum of that user's records whose
//! arrival time is in the window, whatever happened to the workers, and
//! nothing is left in the state once every window closed. Against moto
//! (`servers.sh start --kcl3`), for its TransactWriteItems.

use aws_sdk_dynamodb::types::ScalarAttributeType;
use kcl_testkit::java_kcl3;

use super::state::Purchases;
use super::*;

const WINDOW_MS: i64 = 3_000;

/// `kcl-host run GUEST --window 3s` (the window-totals example in one of
/// its languages) writing to `table`, on moto, with `extra` flags.
fn worker(guest_name: &str, stream: &str, application: &str, id: &str, table: &str, extra: &[&str]) -> KclHost {
    let endpoint = java_kcl3::dynamodb_endpoint();
    let target = format!("totals=dynamodb:{table}");
    let flags = [&["--failover-time", "2s", "--window", "3s", "--output", &target][..], extra].concat();
    start_with_env(guest_name, stream, application, id, &flags, &[("AWS_ENDPOINT_URL_DYNAMODB", &endpoint)])
}

/// The totals table: one item per user and window.
async fn create_totals_table(aws: &AwsClients, table: &str) {
    kcl_testkit::create_table(&aws.dynamodb, table, &[("user", ScalarAttributeType::S), ("window_start_ms", ScalarAttributeType::N)]).await;
}

/// Reads the table until it holds exactly the totals the stream's records
/// make, and says how it differs when it never does.
async fn totals_become_produced(aws: &AwsClients, table: &str, stream: &TestStream) {
    let expected = produced(stream).await;
    assert!(expected.len() > 10, "several windows of several users: {}", expected.len());
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let totals = written(aws, table).await;
        if totals == expected {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let wrong: Vec<String> = expected
                .iter()
                .filter(|(key, sum)| totals.get(*key) != Some(sum))
                .map(|((user, window), sum)| format!("{user}@{window}: {:?} written, {sum} produced", totals.get(&(user.clone(), *window))))
                .chain(totals.keys().filter(|key| !expected.contains_key(*key)).map(|(user, window)| format!("{user}@{window}: written, none produced")))
                .collect();
            panic!("{} of {} totals are wrong, among them: {:?}", wrong.len(), expected.len(), &wrong[..wrong.len().min(10)]);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Reads `status --json` until a shard's progress names its open window
/// (what the dashboard shows), and checks it is a window's start.
async fn open_window_reported(application: &str) {
    let endpoint = java_kcl3::dynamodb_endpoint();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (code, text) = run_to_exit(&["status", "--application", application, "--json"], &[("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())]).await;
        assert_eq!(code, 0, "{text}");
        let report: serde_json::Value = serde_json::Deserializer::from_str(&text).into_iter().next().unwrap().unwrap();
        let starts: Vec<i64> = report["shards"].as_array().unwrap().iter().filter_map(|row| row["progress"]["window_start_ms"].as_i64()).collect();
        if let Some(start) = starts.first() {
            assert_eq!(start % WINDOW_MS, 0, "a window starts on a multiple of its length: {start}");
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no shard's progress names an open window: {report}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn closed(log: &[String]) -> usize {
    count_lines(log, "closed window [")
}

/// (user, window start) → total cents, for every record of the stream.
async fn produced(stream: &TestStream) -> BTreeMap<(String, i64), i64> {
    let mut sums = BTreeMap::new();
    for (record, arrival) in stream.read_all_arrivals().await {
        let cents: i64 = record.data.trim_start_matches(r#"{"cents": "#).trim_end_matches('}').parse().unwrap();
        *sums.entry((record.partition_key, arrival - arrival % WINDOW_MS)).or_default() += cents;
    }
    sums
}

/// (user, window start) → total cents, as the table holds them.
async fn written(aws: &AwsClients, table: &str) -> BTreeMap<(String, i64), i64> {
    let mut totals = BTreeMap::new();
    let mut start = None;
    loop {
        let page = aws.dynamodb.scan().table_name(table).consistent_read(true).set_exclusive_start_key(start).send().await.expect("Scan");
        for item in page.items() {
            let number = |name: &str| item[name].as_n().unwrap().parse::<i64>().unwrap();
            totals.insert((item["user"].as_s().unwrap().clone(), number("window_start_ms")), number("cents"));
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            return totals;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_user_and_window_total_is_exact_and_written_as_its_window_closes_while_workers_are_killed() {
    totals_exact_while_workers_are_killed("window-totals", &[]).await;
}

/// With 8 instances per shard a window closes once all of them finished
/// its records, with the keys every one of them changed.
#[tokio::test(flavor = "multi_thread")]
async fn the_window_totals_are_exact_with_eight_instances_per_shard_while_workers_are_killed() {
    totals_exact_while_workers_are_killed("window-totals", &["--parallelism", "8", "--max-records", "20"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_window_totals_are_exact_while_workers_are_killed() {
    totals_exact_while_workers_are_killed("go-window-totals", &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_window_totals_are_exact_while_workers_are_killed() {
    totals_exact_while_workers_are_killed("py-window-totals", &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_window_totals_are_exact_while_workers_are_killed() {
    totals_exact_while_workers_are_killed("js-window-totals", &[]).await;
}

async fn totals_exact_while_workers_are_killed(guest_name: &str, flags: &[&str]) {
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("windows"), 4).await;
    let (application, table) = (unique("windows-app"), unique("window-totals"));
    create_totals_table(&aws, &table).await;
    let mut first = worker(guest_name, &stream.name, &application, "worker-1", &table, flags);
    let mut second = worker(guest_name, &stream.name, &application, "worker-2", &table, flags);
    let purchases = Purchases::start(&stream, 20, 6);
    first.wait_for("a window closed", LIMIT, |log| closed(log) >= 2).await;
    second.wait_for("a window closed", LIMIT, |log| closed(log) >= 2).await;
    open_window_reported(&application).await;

    // kill -9 one worker, then the other once a third has taken leases and closed windows.
    first.kill().await;
    let mut third = worker(guest_name, &stream.name, &application, "worker-3", &table, flags);
    third.wait_for("windows closed after the kill", LIMIT, |log| closed(log) >= 2).await;
    second.kill().await;
    let mut fourth = worker(guest_name, &stream.name, &application, "worker-4", &table, flags);
    fourth.wait_for("windows closed after the second kill", LIMIT, |log| closed(log) >= 2).await;
    purchases.stop().await;

    // With no more records, the last windows close by the clock.
    totals_become_produced(&aws, &table, &stream).await;

    // Every window closed and committed: each user's state was deleted, and only the index is left… of nothing.
    let (exit, log) = fourth.interrupt().await;
    assert!(exit.success());
    let (exit, _) = third.interrupt().await;
    assert!(exit.success());
    assert!(closed(&log) >= 2);
    let (code, dump) = run_to_exit(&["state", "--application", &application, "dump", "--stream", &stream.name], &[("AWS_ENDPOINT_URL_DYNAMODB", java_kcl3::dynamodb_endpoint().as_str())]).await;
    assert_eq!(code, 0, "{dump}");
    assert!(!dump.contains("user-"), "no user's state outlives its window: {dump}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_window_close_whose_commit_is_refused_or_cut_is_made_again_and_totals_stay_exact() {
    use kcl_testkit::faults::{Fault, FaultProxy, Rule};
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("windows-faults"), 2).await;
    let (application, table) = (unique("windows-faults-app"), unique("window-faults-totals"));
    create_totals_table(&aws, &table).await;
    let proxy = FaultProxy::start(&java_kcl3::dynamodb_endpoint()).await;
    let target = format!("totals=dynamodb:{table}");
    let flags = ["--failover-time", "2s", "--window", "3s", "--output", &target];
    let mut worker = start_with_env("window-totals", &stream.name, &application, "worker-1", &flags, &[("AWS_ENDPOINT_URL_DYNAMODB", &proxy.endpoint)]);
    let purchases = Purchases::start(&stream, 20, 6);
    worker.wait_for("a window closed", LIMIT, |log| closed(log) >= 2).await;
    purchases.stop().await;

    // Once every record is checkpointed, the next write to the state table
    // is a window's close (its state deleted, its index with the
    // checkpoint): refused four times over (the SDK tries each three
    // times), then applied with its answer lost.
    let last: BTreeMap<String, String> = stream.read_all().await.into_iter().map(|r| (r.shard, r.sequence_number)).collect();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while outputs::checkpoints(&aws, &application).await != last {
        assert!(tokio::time::Instant::now() < deadline, "the records were never all checkpointed: {:?} of {last:?}", outputs::checkpoints(&aws, &application).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let state_table = format!("{application}-KclHostState");
    let commit = |fault, times| Rule { table: Some(state_table.clone()), operation: Some("TransactWriteItems"), body_contains: None, fault, times: Some(times) };
    proxy.set(vec![commit(Fault::Fail(500, "InternalServerError"), 12), commit(Fault::LoseAnswer, 1)]);
    worker.wait_for("a close that failed", LIMIT, |log| log.iter().any(|l| l.contains("closing window [") && l.contains("failed"))).await;

    // The windows still open close once the table answers again; the
    // records produced after them make windows of their own.
    let purchases = Purchases::start(&stream, 20, 6);
    let closed_before = closed(&worker.log().await);
    worker.wait_for("windows closed after the faults", LIMIT, |log| closed(log) >= closed_before + 4).await;
    purchases.stop().await;
    assert_eq!(proxy.counts().faulted, 13, "every fault was met");

    totals_become_produced(&aws, &table, &stream).await;
    let (exit, log) = worker.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));
    let (code, dump) = run_to_exit(&["state", "--application", &application, "dump", "--stream", &stream.name], &[("AWS_ENDPOINT_URL_DYNAMODB", java_kcl3::dynamodb_endpoint().as_str())]).await;
    assert_eq!(code, 0, "{dump}");
    assert!(!dump.contains("user-"), "no user's state outlives its window, the ones whose close failed included: {dump}");
}
