//! Exactly-once state: the `user-totals` example sums cents per user in
//! its state, which kcl-host commits with each checkpoint. Judged from the
//! state table: each user's total equals the sum of that user's produced
//! records exactly, whatever happened to the workers meanwhile (kills,
//! handoffs, a swap, a reshard, a commit cut between its parts). Against
//! moto (`servers.sh start --kcl3`): dynalite has no TransactWriteItems.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::AttributeValue;
use kcl_host::records::kpl::{hash_key, HashRange};
use kcl_testkit::faults::{Fault, FaultProxy, Rule};
use kcl_testkit::java_kcl3;
use tokio::sync::watch;

use super::*;

const FLAGS: [&str; 2] = ["--failover-time", "2s"];

/// `kcl-host run user-totals` against moto.
fn worker(stream: &str, application: &str, id: &str, extra: &[&str]) -> KclHost {
    worker_of("user-totals", stream, application, id, extra)
}

/// `kcl-host run GUEST` against moto.
fn worker_of(guest: &str, stream: &str, application: &str, id: &str, extra: &[&str]) -> KclHost {
    let endpoint = java_kcl3::dynamodb_endpoint();
    let mut flags = FLAGS.to_vec();
    flags.extend_from_slice(extra);
    start_with_env(guest, stream, application, id, &flags, &[("AWS_ENDPOINT_URL_DYNAMODB", &endpoint)])
}

/// What was produced: cents per user (or records per user).
pub(super) type Sums = Arc<Mutex<BTreeMap<String, i64>>>;

/// What a [`Purchases`] producer put.
pub(super) struct Produced {
    /// Cents per user.
    pub(super) sums: BTreeMap<String, i64>,
    /// Records per user.
    pub(super) counts: BTreeMap<String, i64>,
}

/// Puts purchases by partition key (the user), `per_tick` every 100 ms over
/// `users` users, until stopped.
pub(super) struct Purchases {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    sums: Sums,
    counts: Sums,
}

impl Purchases {
    pub(super) fn start(stream: &TestStream, users: usize, per_tick: usize) -> Self {
        Self::start_after(stream, users, per_tick, 0)
    }

    /// Like [`Self::start`], putting `backlog` purchases at once first.
    pub(super) fn start_after(stream: &TestStream, users: usize, per_tick: usize, backlog: usize) -> Self {
        let stream = TestStream { name: stream.name.clone(), kinesis: stream.kinesis.clone() };
        let (stop, mut stopped) = watch::channel(false);
        let (sums, counts) = (Sums::default(), Sums::default());
        let (log, counted) = (sums.clone(), counts.clone());
        let task = tokio::spawn(async move {
            let put = |n: usize| {
                let batch: Vec<(String, String)> =
                    (0..n).map(|_| (format!("user-{:03}", fastrand::usize(..users)), format!(r#"{{"cents": {}}}"#, fastrand::i64(1..1000)))).collect();
                let (stream, log, counted) = (&stream, &log, &counted);
                async move {
                    put_purchases(stream, &batch, log).await;
                    let mut counted = counted.lock().unwrap();
                    for (user, _) in &batch {
                        *counted.entry(user.clone()).or_default() += 1;
                    }
                }
            };
            put(backlog).await;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = stopped.changed() => return,
                    _ = tick.tick() => {}
                }
                put(per_tick).await;
            }
        });
        Purchases { stop, task, sums, counts }
    }

    pub(super) async fn stop(self) -> Produced {
        self.stop.send_replace(true);
        self.task.await.expect("the producer does not panic");
        let take = |map: Sums| Arc::try_unwrap(map).expect("the task is done").into_inner().unwrap();
        Produced { sums: take(self.sums), counts: take(self.counts) }
    }
}

/// Puts `(user, data)` purchases by the user's key, adding them to `sums`.
async fn put_purchases(stream: &TestStream, purchases: &[(String, String)], sums: &Sums) {
    let records: Vec<(&[u8], &str)> = purchases.iter().map(|(user, data)| (data.as_bytes(), user.as_str())).collect();
    stream.put_by_key(&records).await;
    let mut sums = sums.lock().unwrap();
    for (user, data) in purchases {
        let cents: i64 = data.trim_start_matches(r#"{"cents": "#).trim_end_matches('}').parse().unwrap();
        *sums.entry(user.clone()).or_default() += cents;
    }
}

/// One state item: the user's total and the shard that wrote it.
#[derive(Debug)]
struct Item {
    total: i64,
    shard: String,
}

/// Every item of the state table (none before it is made). Moto takes
/// seconds over thousands of items: longer than the clients' read time-out.
async fn scan_state(aws: &AwsClients, application: &str) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
    let table = format!("{application}-KclHostState");
    let patient = aws_sdk_dynamodb::config::Builder::default().timeout_config(TimeoutConfig::builder().read_timeout(Duration::from_secs(60)).operation_timeout(Duration::from_secs(60)).operation_attempt_timeout(Duration::from_secs(60)).build());
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let scan = aws.dynamodb.scan().table_name(&table).consistent_read(true).limit(250).set_exclusive_start_key(start).customize().config_override(patient.clone()).send().await;
        let page = match scan {
            Ok(page) => page,
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => return items,
            Err(e) => panic!("Scan of {table}: {e:?}"),
        };
        items.extend(page.items().iter().cloned());
        start = page.last_evaluated_key;
        if start.is_none() {
            return items;
        }
    }
}

/// The state table's items of `stream`, by key.
async fn state_items(aws: &AwsClients, application: &str, stream: &str) -> BTreeMap<String, Item> {
    let text = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        other => panic!("state item attribute {name} is {other:?}"),
    };
    scan_state(aws, application)
        .await
        .iter()
        .filter(|item| !item.contains_key("log") && text(item, "stream") == stream)
        .map(|item| {
            let Some(AttributeValue::B(value)) = item.get("value") else { panic!("a state item without a binary value: {item:?}") };
            let total = std::str::from_utf8(value.as_ref()).unwrap().parse().expect("a decimal total");
            (text(item, "key"), Item { total, shard: text(item, "shard") })
        })
        .collect()
}

/// Reads the state table until each user's total is `expected`, and says
/// how it differs when it never is.
async fn totals_become(aws: &AwsClients, application: &str, stream: &str, expected: &BTreeMap<String, i64>) -> BTreeMap<String, Item> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let items = state_items(aws, application, stream).await;
        let totals: BTreeMap<String, i64> = items.iter().map(|(k, item)| (k.clone(), item.total)).collect();
        if totals == *expected {
            return items;
        }
        if tokio::time::Instant::now() >= deadline {
            let wrong: Vec<String> = expected
                .iter()
                .filter(|(user, sum)| totals.get(*user) != Some(sum))
                .map(|(user, sum)| format!("{user}: {:?} in state, {sum} produced", totals.get(user)))
                .collect();
            panic!("{} of {} totals are not the produced sums, among them: {:?}", wrong.len(), expected.len(), &wrong[..wrong.len().min(10)]);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Asserts that each item was written by a shard whose hash-key range holds the key.
async fn owned_by_their_shards(stream: &TestStream, items: &BTreeMap<String, Item>) {
    let ranges: BTreeMap<String, HashRange> = stream
        .shards()
        .await
        .into_iter()
        .map(|s| (s.id, HashRange::parse(&s.starting_hash_key, &s.ending_hash_key).unwrap()))
        .collect();
    for (key, item) in items {
        let range = ranges.get(&item.shard).unwrap_or_else(|| panic!("{key} is owned by {}, not a shard of the stream", item.shard));
        assert!(range.contains(key, None), "{key} (hash {}) is owned by {}, whose range is {range:?}", hash_key(key, None), item.shard);
    }
}

/// Appends a custom section to a component: the same processor under
/// another hash, a new version to swap to.
pub(super) fn another_version(name: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(guest(name)).unwrap();
    let (section, payload) = ("kcl-host-test", b"v2");
    let size = 1 + section.len() + payload.len();
    bytes.extend([0, size as u8, section.len() as u8]);
    bytes.extend(section.as_bytes());
    bytes.extend(payload);
    bytes
}

#[tokio::test(flavor = "multi_thread")]
async fn user_totals_stay_exact_through_kills_handoffs_a_swap_a_split_and_a_merge() {
    totals_stay_exact_through_kills_handoffs_a_swap_a_split_and_a_merge(&[]).await;
}

/// With 8 instances per shard each key's state is changed by one of them at
/// a time, and the host commits with each checkpoint it writes exactly the
/// changes of the records below it.
#[tokio::test(flavor = "multi_thread")]
async fn user_totals_stay_exact_with_eight_instances_per_shard_through_kills_handoffs_a_swap_a_split_and_a_merge() {
    totals_stay_exact_through_kills_handoffs_a_swap_a_split_and_a_merge(&["--parallelism", "8", "--max-records", "20"]).await;
}

/// Clients, a new stream of `shards` shards and an application named
/// after `name`, and moto behind a fault proxy for the workers.
async fn behind_a_fault_proxy(name: &str, shards: i32) -> (AwsClients, TestStream, String, FaultProxy) {
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique(name), shards).await;
    let application = unique(&format!("{name}-app"));
    (aws, stream, application, FaultProxy::start(&java_kcl3::dynamodb_endpoint()).await)
}

/// `--parallelism 8` through the fault proxy: the transactions that commit
/// the state with a checkpoint are refused, cut (the connection reset),
/// slow, and applied with their answer lost; the worker is killed (-9)
/// while they fail and the next owner meets the rest. Every user's total is
/// still the sum of that user's purchases: nothing lost, nothing counted
/// twice.
#[tokio::test(flavor = "multi_thread")]
async fn eight_instances_per_shard_keep_totals_exact_through_refused_lost_and_slow_commits_and_a_kill() {
    let (aws, stream, application, proxy) = behind_a_fault_proxy("state-par-faults", 2).await;
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint.as_str())];
    let flags = [&FLAGS[..], &["--parallelism", "8", "--max-records", "20"]].concat();
    let purchases = Purchases::start_after(&stream, 40, 16, 2000);
    let mut first = start_with_env("user-totals", &stream.name, &application, "worker-1", &flags, &env);
    first.wait_for("commits", LIMIT, |log| count_lines(log, "kcl_host::guest: committed ") >= 20).await;

    let commit = |fault, times| Rule { operation: Some("TransactWriteItems"), table: Some(application.clone()), body_contains: None, fault, times: Some(times) };
    proxy.set(vec![
        commit(Fault::Fail(500, "InternalFailure"), 3),
        commit(Fault::LoseAnswer, 2),
        commit(Fault::Reset, 1),
        commit(Fault::Delay(Duration::from_millis(1500)), 2),
    ]);
    let deadline = tokio::time::Instant::now() + LIMIT;
    while proxy.counts().faulted < 3 {
        assert!(tokio::time::Instant::now() < deadline, "no commit met a fault");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.kill().await;
    let second = start_with_env("user-totals", &stream.name, &application, "worker-2", &flags, &env);
    while proxy.counts().faulted < 8 {
        assert!(tokio::time::Instant::now() < deadline, "the next owner's commits never met the other faults: {} of 8", proxy.counts().faulted);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let expected = purchases.stop().await.sums;
    let items = totals_become(&aws, &application, &stream.name, &expected).await;
    owned_by_their_shards(&stream, &items).await;
    let (exit, log) = second.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));
}

/// Workers with `flags` sum purchases while two are killed, one is stopped,
/// one swaps its processor and the stream is split and merged: every
/// user's total in the state table ends up the sum of what was produced.
async fn totals_stay_exact_through_kills_handoffs_a_swap_a_split_and_a_merge(flags: &[&str]) {
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("state"), 8).await;
    let application = unique("state-app");
    let admin = admin_address();
    let worker = |id: &str, extra: &[&str]| worker(&stream.name, &application, id, &[flags, extra].concat());
    let mut first = worker("worker-1", &[]);
    let mut second = worker("worker-2", &["--admin-listen", &admin]);
    // A backlog: calls of many keys side by side when there are several instances.
    let purchases = Purchases::start_after(&stream, 40, 16, 4000);
    first.wait_for("leases", LIMIT, |log| count_lines(log, "kcl_host::guest: committed ") >= 40).await;
    second.wait_for("leases", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;

    // kill -9 the first; a third takes its leases after the failover time.
    first.kill().await;
    let mut third = worker("worker-3", &[]);
    third.wait_for("leases", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;

    // A split and a merge while the purchases go on.
    let open: Vec<_> = stream.shards().await.into_iter().filter(|s| !s.closed).collect();
    let children = stream.split(&open[0].id).await;
    assert_eq!(children.len(), 2);
    let mut by_range: Vec<_> = open[1..].iter().map(|s| (s.starting_hash_key.parse::<u128>().unwrap(), s)).collect();
    by_range.sort_by_key(|(start, _)| *start);
    let (a, b) = by_range
        .windows(2)
        .map(|w| (w[0].1, w[1].1))
        .find(|(a, b)| a.ending_hash_key.parse::<u128>().unwrap() + 1 == b.starting_hash_key.parse::<u128>().unwrap())
        .expect("two adjacent open shards");
    stream.merge(&a.id, &b.id).await;

    // A swap on the second worker to another version of the same processor.
    let (status, body) = http(&admin, "POST", "/swap", "application/wasm", &another_version("user-totals")).await;
    assert!(status.contains("200"), "{status}: {body}");

    // Its metrics count the state it read and committed.
    let (_, metrics) = http_get(&admin, "/metrics").await;
    for series in ["kcl_host_state_reads_total", "kcl_host_state_cache_hits_total", "kcl_host_state_writes_total", "kcl_host_state_commit_seconds_count"] {
        let total: f64 = metrics.lines().filter(|l| l.starts_with(series)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum();
        assert!(total > 0.0, "{series} is 0 or missing:\n{metrics}");
    }

    // SIGTERM the second (a handoff: it checkpoints and lets go), and kill -9 the third.
    let (exit, _) = second.interrupt().await;
    assert!(exit.success(), "the second worker stops cleanly on SIGTERM");
    let fourth = worker("worker-4", &[]);
    third.kill().await;
    let fifth = worker("worker-5", &[]);

    let expected = purchases.stop().await.sums;
    assert!(expected.values().sum::<i64>() > 0);
    let items = totals_become(&aws, &application, &stream.name, &expected).await;
    owned_by_their_shards(&stream, &items).await;

    // Stopped, the workers commit nothing more: still exact.
    for worker in [fourth, fifth] {
        let (exit, _) = worker.interrupt().await;
        assert!(exit.success());
    }
    let totals: BTreeMap<String, i64> = state_items(&aws, &application, &stream.name).await.into_iter().map(|(k, i)| (k, i.total)).collect();
    assert_eq!(totals, expected);
}

/// Lease rows naming a committed state log not yet applied.
async fn pending_logs(aws: &AwsClients, application: &str) -> usize {
    let scan = aws.dynamodb.scan().table_name(application).consistent_read(true).send().await.expect("Scan of the lease table");
    scan.items().iter().filter(|row| row.contains_key("statePending")).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_of_more_keys_than_one_transaction_holds_killed_before_it_was_applied_stays_exact() {
    let (aws, stream, application, proxy) = behind_a_fault_proxy("state-log", 1).await;
    let mut first = start_with_env("user-totals", &stream.name, &application, "worker-1", &FLAGS, &[("AWS_ENDPOINT_URL_DYNAMODB", &proxy.endpoint)]);
    first.wait_for("the lease", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    // The first worker writes its log and commits, and cannot apply it.
    proxy.set(vec![Rule::every(Some("TransactWriteItems"), Fault::Fail(500, "InternalFailure"))]);
    // 450 users in one PutRecords, so in one batch: 5 transactions' worth.
    let sums = Sums::default();
    let burst: Vec<(String, String)> = (0..450).map(|i| (format!("user-{i:04}"), format!(r#"{{"cents": {}}}"#, i + 1))).collect();
    put_purchases(&stream, &burst, &sums).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    // Committed (the lease row names the log) and applying (refused) at once.
    while pending_logs(&aws, &application).await == 0 || proxy.counts().faulted == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the commit never named its log in the lease row, or never tried to apply it");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(state_items(&aws, &application, &stream.name).await.is_empty(), "nothing applied yet");
    first.kill().await;

    // The next owner applies the log before anything reads the state.
    let mut second = worker(&stream.name, &application, "worker-2", &[]);
    second.wait_for("the log applied", LIMIT, |log| count_lines(log, "applying the state its last owner committed and did not apply") >= 1).await;
    let expected = Arc::try_unwrap(sums).unwrap().into_inner().unwrap();
    let items = totals_become(&aws, &application, &stream.name, &expected).await;
    owned_by_their_shards(&stream, &items).await;
    assert_eq!(pending_logs(&aws, &application).await, 0);
    assert!(scan_state(&aws, &application).await.iter().all(|item| !item.contains_key("log")), "the applied log is deleted");
    let (exit, log) = second.interrupt().await;
    assert!(exit.success());
    assert_eq!(count_lines(&log, "kcl_host::guest: committed "), 0, "the batch was not processed again: {log:?}");

    // What an operator reads: one key, and every key with the shard that wrote it.
    let endpoint = java_kcl3::dynamodb_endpoint();
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())];
    let (code, text) = run_to_exit(&["state", "--application", &application, "get", "--stream", &stream.name, "--key", "user-0041"], &env).await;
    assert_eq!((code, text.trim()), (0, "42"), "{text}");
    let (code, text) = run_to_exit(&["state", "--application", &application, "dump", "--stream", &stream.name], &env).await;
    assert_eq!(code, 0, "{text}");
    assert_eq!(text.lines().filter(|l| l.contains(" = ") && l.contains("shardId-")).count(), 450, "{text}");
    let (code, text) = run_to_exit(&["state", "--application", &application, "get", "--stream", &stream.name, "--key", "nobody"], &env).await;
    assert!(code != 0 && text.contains("`nobody` has no value"), "{text}");
    let (code, text) = run_to_exit(&["status", "--application", &application, "--state"], &env).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("shardId-000000000000 state: 450 keys, "), "{text}");
}

/// The keys of the state log items in the state table.
async fn log_items(aws: &AwsClients, application: &str) -> Vec<String> {
    scan_state(aws, application).await.iter().filter(|item| item.contains_key("log")).map(|item| item["stateKey"].as_s().unwrap().clone()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_log_written_and_never_committed_is_deleted_by_the_next_owner() {
    let (aws, stream, application, proxy) = behind_a_fault_proxy("state-orphan", 1).await;
    let mut first = start_with_env("user-totals", &stream.name, &application, "worker-1", &FLAGS, &[("AWS_ENDPOINT_URL_DYNAMODB", &proxy.endpoint)]);
    first.wait_for("the lease", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    // The log is written; the lease row's update that would commit it never lands.
    let commit = Rule { table: None, operation: Some("UpdateItem"), body_contains: Some("statePending".into()), fault: Fault::Fail(500, "InternalFailure"), times: None };
    proxy.set(vec![commit]);
    let sums = Sums::default();
    let burst: Vec<(String, String)> = (0..450).map(|i| (format!("user-{i:04}"), format!(r#"{{"cents": {}}}"#, i + 1))).collect();
    put_purchases(&stream, &burst, &sums).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while log_items(&aws, &application).await.is_empty() || proxy.counts().faulted == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the log was never written, or its commit never tried");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    first.kill().await;
    assert_eq!(pending_logs(&aws, &application).await, 0, "never committed");
    let endpoint = java_kcl3::dynamodb_endpoint();
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str())];
    let (code, text) = run_to_exit(&["status", "--application", &application, "--state"], &env).await;
    assert!(code == 0 && text.contains(" state log items"), "status counts the leftovers: {text}");

    // The next owner deletes it, processes the records again and commits (through a log of its own).
    let second = worker(&stream.name, &application, "worker-2", &[]);
    let expected = Arc::try_unwrap(sums).unwrap().into_inner().unwrap();
    totals_become(&aws, &application, &stream.name, &expected).await;
    // Its own log goes too, once applied (which may end after the totals are right).
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let left = log_items(&aws, &application).await;
        if left.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "log items are left: {left:?}\n{}", second.log().await.join("\n"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (exit, log) = second.interrupt().await;
    assert!(exit.success(), "{log:?}");
    assert!(log_items(&aws, &application).await.is_empty(), "no log item is left");
    assert!(count_lines(&log, "written and never committed") >= 1, "the log says what it deleted: {log:?}");
    let scan = aws.dynamodb.scan().table_name(&application).consistent_read(true).send().await.expect("Scan of the lease table");
    assert!(scan.items().iter().all(|row| !row.contains_key("stateLog") && !row.contains_key("statePending")), "{:?}", scan.items());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_put_with_an_explicit_hash_key_keeps_its_state_on_the_shard_its_records_go_to() {
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("state-ehk"), 2).await;
    let application = unique("state-ehk-app");
    let shards = stream.shards().await;
    let range = |i: usize| HashRange::parse(&shards[i].starting_hash_key, &shards[i].ending_hash_key).unwrap();
    // A user whose MD5 is in the first shard's range, put on the second by its hash key.
    let user = (0..).map(|i| format!("user-{i}")).find(|user| range(0).contains(user, None)).unwrap();
    let purchases: Vec<String> = (1..=5).map(|cents| format!(r#"{{"cents": {cents}}}"#)).collect();
    let records: Vec<(&[u8], &str)> = purchases.iter().map(|data| (data.as_bytes(), user.as_str())).collect();
    stream.put_keyed(&shards[1].id, &records).await;
    let mut worker = worker(&stream.name, &application, "worker-1", &[]);
    worker.wait_for("the totals committed", LIMIT, |log| count_lines(log, "kcl_host::guest: committed 1 totals") >= 1).await;
    let (exit, _) = worker.interrupt().await;
    assert!(exit.success());
    let items = state_items(&aws, &application, &stream.name).await;
    let item = &items[&user];
    assert_eq!((item.total, item.shard.as_str()), (15, shards[1].id.as_str()), "the state lives where the records went");
}

/// Splits the first open shard and merges two adjacent others.
async fn split_and_merge(stream: &TestStream) {
    let open: Vec<_> = stream.shards().await.into_iter().filter(|s| !s.closed).collect();
    assert_eq!(stream.split(&open[0].id).await.len(), 2);
    let mut by_range: Vec<_> = open[1..].iter().map(|s| (s.starting_hash_key.parse::<u128>().unwrap(), s)).collect();
    by_range.sort_by_key(|(start, _)| *start);
    let (a, b) = by_range
        .windows(2)
        .map(|w| (w[0].1, w[1].1))
        .find(|(a, b)| a.ending_hash_key.parse::<u128>().unwrap() + 1 == b.starting_hash_key.parse::<u128>().unwrap())
        .expect("two adjacent open shards");
    stream.merge(&a.id, &b.id).await;
}

/// Reads the lease table until `n` leases are at `SHARD_END`; the log of
/// `worker` tells why when they never are.
async fn shards_ended(aws: &AwsClients, application: &str, n: usize, worker: &KclHost) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let rows = leases(&aws.dynamodb, application).await;
        if rows.iter().filter(|l| l.checkpoint == Checkpoint::ShardEnd).count() >= n {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("fewer than {n} leases at SHARD_END: {rows:#?}\nlog of one worker:\n{}", worker.log().await.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn state_left_uncheckpointed_when_a_shard_ends_is_committed_with_shard_end() {
    // The keyed guest counts records per key in state and checkpoints only
    // after a `checkpoint` record; nothing in its shutdown(shard-end). So
    // every parent's changes reach the table only with its SHARD_END.
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("state-end"), 4).await;
    let application = unique("state-end-app");
    let flags = ["--var", "checkpoint=marked"];
    let mut first = worker_of("keyed", &stream.name, &application, "worker-1", &flags);
    let second = worker_of("keyed", &stream.name, &application, "worker-2", &flags);
    let purchases = Purchases::start(&stream, 40, 8);
    first.wait_for("leases", LIMIT, |log| count_lines(log, "first lease pass done") >= 1).await;

    split_and_merge(&stream).await;
    // The three parents end (their pending counts committed with SHARD_END);
    // then the first worker hands its leases over (shutdown(requested), no
    // checkpoint: what it had not committed is counted again by the next owner).
    shards_ended(&aws, &application, 3, &first).await;
    let (exit, first_log) = first.interrupt().await;
    assert!(exit.success(), "the first worker stops cleanly: {first_log:?}");
    let produced = purchases.stop().await;

    // One `checkpoint` record on every open shard, under a key of its range:
    // each shard commits what it counted.
    let open: Vec<HashRange> = stream
        .shards()
        .await
        .into_iter()
        .filter(|s| !s.closed)
        .map(|s| HashRange::parse(&s.starting_hash_key, &s.ending_hash_key).unwrap())
        .collect();
    let markers: Vec<String> = open.iter().map(|range| (0..).map(|i| format!("marker-{i}")).find(|key| range.contains(key, None)).unwrap()).collect();
    let records: Vec<(&[u8], &str)> = markers.iter().map(|key| (&b"checkpoint"[..], key.as_str())).collect();
    stream.put_by_key(&records).await;

    let mut expected: BTreeMap<String, i64> = produced.counts;
    expected.extend(markers.iter().map(|key| (key.clone(), 1)));
    let items = totals_become(&aws, &application, &stream.name, &expected).await;
    owned_by_their_shards(&stream, &items).await;
    let (exit, log) = second.interrupt().await;
    assert!(exit.success(), "{log:?}");
    let committed_at_end = count_lines(&log, "with SHARD_END") + count_lines(&first_log, "with SHARD_END");
    assert!(committed_at_end >= 1, "the log says what SHARD_END committed");
}

/// The Python and JavaScript ports of `user-totals` (their SDKs'
/// `kcl.state`): exact totals through a kill -9 and a handoff, as the Rust one.
async fn totals_of_another_sdk_stay_exact_through_a_kill_and_a_handoff(guest_name: &str) {
    let aws = java_kcl3::clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique(guest_name), 4).await;
    let application = unique(&format!("{guest_name}-app"));
    let mut first = worker_of(guest_name, &stream.name, &application, "worker-1", &[]);
    let mut second = worker_of(guest_name, &stream.name, &application, "worker-2", &[]);
    let purchases = Purchases::start(&stream, 24, 8);
    for worker in [&mut first, &mut second] {
        worker.wait_for("its totals committed", LIMIT, |log| count_lines(log, "committed ") >= 3).await;
    }
    first.kill().await;
    let third = worker_of(guest_name, &stream.name, &application, "worker-3", &[]);
    let (exit, _) = second.interrupt().await;
    assert!(exit.success(), "the second worker stops cleanly on SIGTERM");
    let fourth = worker_of(guest_name, &stream.name, &application, "worker-4", &[]);
    let expected = purchases.stop().await.sums;
    let items = totals_become(&aws, &application, &stream.name, &expected).await;
    owned_by_their_shards(&stream, &items).await;
    for worker in [third, fourth] {
        let (exit, log) = worker.interrupt().await;
        assert!(exit.success(), "{}", log.join("\n"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn python_user_totals_stay_exact_through_a_kill_and_a_handoff() {
    totals_of_another_sdk_stay_exact_through_a_kill_and_a_handoff("py-user-totals").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_user_totals_stay_exact_through_a_kill_and_a_handoff() {
    totals_of_another_sdk_stay_exact_through_a_kill_and_a_handoff("js-user-totals").await;
}
