//! Outputs, end to end: the `forward` guest sends every record on, tagged
//! `<shard> <sequence number> <data>`, then checkpoints. Judged from the
//! output stream (or the HTTP sink), the lease table and the logs: every
//! input reaches its output, no checkpoint is ever ahead of the outputs of
//! the records it covers, and duplicates come only after a crash's checkpoint.

use kcl_testkit::faults::{Fault, FaultProxy, Rule};
use kcl_testkit::http_sink::{HttpSink, Mode};
use kcl_testkit::producer::Producer;
use kcl_testkit::{at_or_before, StreamRecord};

use serde_json::Value;

use super::*;

/// The checkpoint of each shard, as the lease table has it now.
pub(super) async fn checkpoints(aws: &AwsClients, application: &str) -> BTreeMap<String, String> {
    leases(&aws.dynamodb, application)
        .await
        .into_iter()
        .filter_map(|l| match l.checkpoint {
            Checkpoint::At(position) => Some((l.key.into(), position.sequence_number().to_owned())),
            _ => None,
        })
        .collect()
}

/// The inputs each output stands for: `(shard, sequence number)`, with how often.
pub(super) fn forwarded(outputs: &[String]) -> BTreeMap<(String, String), usize> {
    let mut seen = BTreeMap::new();
    for line in outputs {
        let mut words = line.splitn(3, ' ');
        if let (Some(shard), Some(seq)) = (words.next(), words.next()) {
            *seen.entry((shard.to_owned(), seq.to_owned())).or_default() += 1;
        }
    }
    seen
}

/// The inputs at or before their shard's checkpoint whose output is not in `outputs`.
pub(super) fn behind_checkpoint(inputs: &[StreamRecord], checkpoints: &BTreeMap<String, String>, outputs: &BTreeMap<(String, String), usize>) -> Vec<String> {
    inputs
        .iter()
        .filter(|r| checkpoints.get(&r.shard).is_some_and(|cp| at_or_before(&r.sequence_number, cp)))
        .filter(|r| !outputs.contains_key(&(r.shard.clone(), r.sequence_number.clone())))
        .map(|r| format!("{} {} {}", r.shard, r.sequence_number, r.data))
        .collect()
}

/// Polls `done` until it holds: what the tests wait on here (an HTTP sink, a
/// stream) has no event to await. Panics after [`LIMIT`], saying `what`.
pub(super) async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting for {what} after {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until every one of `inputs` has its output in `output`: up to
/// twice [`LIMIT`] without progress (a loaded machine drains a backlog
/// slowly, and a batch whose flush failed waits up to 30 s for its retry).
/// A stall panics with what is missing, the checkpoints and `host`'s log.
pub(super) async fn all_forwarded(inputs: &[StreamRecord], output: &TestStream, aws: &AwsClients, application: &str, host: &KclHost) {
    const QUIET: Duration = Duration::from_secs(2 * LIMIT.as_secs());
    let mut deadline = tokio::time::Instant::now() + QUIET;
    let mut seen = 0;
    loop {
        let outs = forwarded(&data(&output.read_all().await));
        let missing: Vec<String> = inputs
            .iter()
            .filter(|r| !outs.contains_key(&(r.shard.clone(), r.sequence_number.clone())))
            .map(|r| format!("{} {} {}", r.shard, r.sequence_number, r.data))
            .collect();
        if missing.is_empty() {
            return;
        }
        let done = inputs.len() - missing.len();
        if done > seen {
            (seen, deadline) = (done, tokio::time::Instant::now() + QUIET);
        }
        if tokio::time::Instant::now() >= deadline {
            let cps = checkpoints(aws, application).await;
            let log = host.log().await;
            let tail: Vec<&String> = log.iter().filter(|l| !l.contains("kcl_host::guest")).rev().take(60).collect();
            panic!(
                "{done} of {} inputs reached the output stream; no more for {QUIET:?}; missing: {missing:#?}\n\
                 checkpoints now: {cps:#?}\nthe worker's last lines: {tail:#?}",
                inputs.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(super) fn data(records: &[StreamRecord]) -> Vec<String> {
    records.iter().map(|r| r.data.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_survive_kill_9_and_no_checkpoint_is_ever_ahead_of_them() {
    let aws = clients().await;
    let (input, output, application) = (unique("out-in"), unique("out-out"), unique("out-app"));
    let input = TestStream::create(&aws.kinesis, &input, 8).await;
    let output = TestStream::create(&aws.kinesis, &output, 2).await;
    let target = format!("out=kinesis:{}", output.name);
    let flags = ["--failover-time", "4s", "--output", &target];
    // Every output write takes 400 ms: a checkpoint written before its
    // outputs would be seen ahead of them, and lose them at a kill.
    let proxy = FaultProxy::start(&super::faults::upstream("KINESIS")).await;
    proxy.set(vec![Rule::every(Some("PutRecords"), Fault::Delay(Duration::from_millis(400)))]);
    let start = |worker: &str| super::faults::start_through(&proxy, "KINESIS", "forward", &input.name, &application, worker, &flags);
    let producer = Producer::start(&input, "o", Duration::from_millis(150)).await;
    let first = start("w1");
    // Duplicates may only follow these: the checkpoints just before each kill.
    let mut at_kills: Vec<BTreeMap<String, String>> = Vec::new();
    let mut samples = 0;
    for round in 0..3 {
        let mut second = start(&format!("w2-{round}"));
        second.wait_for("some records forwarded", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 40).await;
        // The check at the heart of it: read the checkpoints, then the outputs.
        let cps = checkpoints(&aws, &application).await;
        let outs = forwarded(&data(&output.read_all().await));
        let ins = input.read_all().await;
        let missing = behind_checkpoint(&ins, &cps, &outs);
        assert!(missing.is_empty(), "checkpoints ahead of their outputs: {missing:?}");
        samples += cps.len();
        at_kills.push(cps);
        second.kill().await;
    }
    let produced = producer.stop().await;
    let ins = input.read_all().await;
    assert_eq!(ins.len(), produced.len());
    all_forwarded(&ins, &output, &aws, &application, &first).await;
    let outputs = data(&output.read_all().await);
    let outs = forwarded(&outputs);
    for r in &ins {
        let n = outs.get(&(r.shard.clone(), r.sequence_number.clone())).copied().unwrap_or(0);
        assert!(n >= 1, "input {} {} {} never reached the output stream", r.shard, r.sequence_number, r.data);
        if n > 1 {
            let after_a_kill = at_kills.iter().any(|cps| cps.get(&r.shard).is_none_or(|cp| !at_or_before(&r.sequence_number, cp)));
            assert!(after_a_kill, "input {} {} was forwarded {n} times though it was checkpointed before every kill", r.shard, r.sequence_number);
        }
    }
    let final_cps = checkpoints(&aws, &application).await;
    assert!(behind_checkpoint(&ins, &final_cps, &outs).is_empty());
    let duplicates = outs.values().filter(|n| **n > 1).count();
    let (status, log) = first.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(log.iter().any(|l| l.contains("outputs written: out=")), "the exit line counts outputs");
    eprintln!(
        "{} inputs, {} outputs, {duplicates} forwarded twice or more, {samples} checkpoints checked against the outputs",
        ins.len(),
        outputs.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_target_holds_the_checkpoint_back_and_nothing_is_lost_when_it_returns() {
    let aws = clients().await;
    let (input, application) = (unique("http-in"), unique("http-app"));
    let input = TestStream::create(&aws.kinesis, &input, 2).await;
    let sink = HttpSink::start().await;
    let target = format!("out=http://{}/ingest", sink.address());
    let admin = admin_address();
    let mut worker = start_with("forward", &input.name, &application, "w1", &["--output", &target, "--admin-listen", &admin]);
    let shards: Vec<String> = input.shards().await.into_iter().map(|s| s.id).collect();
    let first = one_each(&input, &shards, "before").await;
    worker.wait_for("the first records forwarded", LIMIT, |log| processed(log, &first)).await;
    until("both shards checkpointed", || async { checkpoints(&aws, &application).await.len() == 2 }).await;
    let cps_before = checkpoints(&aws, &application).await;
    assert_eq!(sink.lines().len(), 2, "their outputs were posted first");

    // Down: the endpoint answers 503, then goes silent (a black hole).
    sink.set_mode(Mode::Fail);
    let during = one_each(&input, &shards, "during").await;
    assert_eq!(during.len(), 2);
    worker.wait_for("a write answered 503", LIMIT, |log| log.iter().any(|l| l.contains("answered 503") && l.contains("trying again"))).await;
    sink.set_mode(Mode::Silent);
    worker.wait_for("a flush given up (the batch is delivered again)", LIMIT, |log| log.iter().any(|l| l.contains("the outputs could not be written"))).await;
    assert_eq!(checkpoints(&aws, &application).await, cps_before, "no checkpoint moved while the target was down");
    let (_, metrics) = http_get(&admin, "/metrics").await;
    assert!(series(&metrics, "kcl_host_output_failures_total", None).is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(series(&metrics, "kcl_host_output_records_total", None), Some(2.0), "only the first two were written");

    sink.set_mode(Mode::Ok);
    let outs = || forwarded(&sink.lines().iter().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["data"].as_str().unwrap().to_owned()).collect::<Vec<_>>());
    let ins = input.read_all().await;
    assert_eq!(ins.len(), 4);
    until("every output posted", || async { ins.iter().all(|r| outs().contains_key(&(r.shard.clone(), r.sequence_number.clone()))) }).await;
    until("the checkpoints past the outage", || async { checkpoints(&aws, &application).await.len() == 2 && checkpoints(&aws, &application).await != cps_before }).await;
    let cps_after = checkpoints(&aws, &application).await;
    assert!(behind_checkpoint(&ins, &cps_after, &outs()).is_empty());
    assert!(worker.log().await.iter().any(|l| l.contains(&during[0])), "the outage's records were processed");
    let (_, metrics) = http_get(&admin, "/metrics").await;
    assert!(series(&metrics, "kcl_host_output_records_total", None).is_some_and(|n| n >= 4.0), "{metrics}");
    assert!(series(&metrics, "kcl_host_output_retries_total", None).is_some_and(|n| n >= 1.0), "{metrics}");
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_reach_only_allowed_hosts_and_read_their_variables() {
    let aws = clients().await;
    let (input, application) = (unique("net-in"), unique("net-app"));
    let input = TestStream::create(&aws.kinesis, &input, 1).await;
    let (allowed, other) = (HttpSink::start().await, HttpSink::start().await);
    let allow = format!("http://{}", allowed.address());
    let mut worker = start_with(
        "forward",
        &input.name,
        &application,
        "w1",
        &["--allow-outbound", &allow, "--var", "greeting=hello there", "--var", "target=out", "--output", "out=stdout"],
    );
    let shard = input.shards().await.remove(0).id;
    let (ok_url, denied_url) = (format!("http://{}/users/ana", allowed.address()), format!("http://{}/users/ben", other.address()));
    input.put(&shard, &[format!("http:{ok_url}"), format!("http:{denied_url}")]).await;
    worker.wait_for("both calls", LIMIT, |log| count_lines(log, "kcl_host::guest: http ") >= 2).await;
    let log = worker.log().await;
    assert!(log.iter().any(|l| l.contains(&format!("http {ok_url} 200"))), "the allowed call went through");
    let denied = log.iter().find(|l| l.contains(&format!("http {denied_url} failed"))).expect("the denied call failed in the guest");
    assert!(denied.to_lowercase().contains("denied"), "the guest sees HTTP-request-denied: {denied}");
    assert_eq!(allowed.requests(), ["GET /users/ana"]);
    assert!(other.requests().is_empty(), "nothing reached a host that was not allowed");
    assert_eq!(count_lines(&log, "was denied (it sees HTTP-request-denied)"), 1, "the host says so once");
    assert!(log.iter().any(|l| l.contains("var greeting=hello there")), "the guest read its variable");
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enrich_example_looks_users_up_over_http_and_forwards_to_kinesis() {
    enrich_and_forward("enrich").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_enrich_example_fetches_users_and_forwards_to_kinesis() {
    enrich_and_forward("js-enrich").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_enrich_example_looks_users_up_with_kcl_http_and_forwards_to_kinesis() {
    enrich_and_forward("py-enrich").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_enrich_example_looks_users_up_with_net_http_and_forwards_to_kinesis() {
    enrich_and_forward("go-enrich").await;
}

/// The enrich example (Rust, JavaScript with `fetch`, Python with
/// `kcl.http` or Go with net/http over `kclhttp`) against a local API.
async fn enrich_and_forward(example: &str) {
    let aws = clients().await;
    let (input, output, application) = (unique("enrich-in"), unique("enrich-out"), unique("enrich-app"));
    let input = TestStream::create(&aws.kinesis, &input, 1).await;
    let output = TestStream::create(&aws.kinesis, &output, 1).await;
    let api = HttpSink::start().await;
    let (api_url, target) = (format!("http://{}", api.address()), format!("enriched=kinesis:{}", output.name));
    let var = format!("api_url={api_url}");
    let worker = start_with(example, &input.name, &application, "w1", &["--var", &var, "--allow-outbound", &api_url, "--output", &target]);
    let shard = input.shards().await.remove(0).id;
    let events = [r#"{"user":"ana","kind":"purchase","amount":12.5}"#, "not json", r#"{"user":"ben","kind":"view"}"#];
    input.put_keyed(&shard, &events.map(|e| (e.as_bytes(), "k"))).await;
    until("two enriched events", || async { output.read_all().await.len() >= 2 }).await;
    let enriched = output.read_all().await;
    let users: Vec<(&str, Value)> = enriched.iter().map(|r| (r.partition_key.as_str(), serde_json::from_str(&r.data).unwrap())).collect();
    assert_eq!(users.len(), 2, "the record that is not an event is skipped: {enriched:?}");
    for ((key, event), user) in users.iter().zip(["ana", "ben"]) {
        assert_eq!((*key, event["user"].as_str()), (user, Some(user)), "in order, keyed by user");
        assert_eq!(event["profile"]["path"], format!("/users/{user}"));
        assert_eq!(event["profile"]["tier"], "gold");
    }
    assert_eq!(users[0].1["amount"], 12.5, "the event's own fields stay");
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_totals_example_writes_per_user_totals_to_dynamodb() {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    let aws = clients().await;
    let (input, application, table) = (unique("totals-in"), unique("totals-app"), unique("totals"));
    let input = TestStream::create(&aws.kinesis, &input, 2).await;
    aws.dynamodb
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(AttributeDefinition::builder().attribute_name("user").attribute_type(ScalarAttributeType::S).build().unwrap())
        .key_schema(KeySchemaElement::builder().attribute_name("user").key_type(KeyType::Hash).build().unwrap())
        .send()
        .await
        .expect("CreateTable");
    let target = format!("totals=dynamodb:{table}");
    let worker = start_with("go-totals", &input.name, &application, "w1", &["--output", &target]);
    let shards: Vec<String> = input.shards().await.into_iter().map(|s| s.id).collect();
    let purchase = |user: &str, amount: f64| format!(r#"{{"user":"{user}","kind":"purchase","amount":{amount}}}"#);
    let ana = [purchase("ana", 12.5), purchase("ana", 7.0), r#"{"user":"ana","kind":"view"}"#.to_owned()];
    let ben = [purchase("ben", 3.25)];
    input.put_keyed(&shards[0], &ana.iter().map(|e| (e.as_bytes(), "ana")).collect::<Vec<_>>()).await;
    input.put_keyed(&shards[1], &ben.iter().map(|e| (e.as_bytes(), "ben")).collect::<Vec<_>>()).await;
    let items = || async {
        let scan = aws.dynamodb.scan().table_name(&table).send().await.expect("Scan");
        let mut totals = BTreeMap::new();
        for item in scan.items() {
            let user = item["user"].as_s().unwrap().clone();
            totals.insert(user, (item["total"].as_n().unwrap().clone(), item["purchases"].as_n().unwrap().clone()));
        }
        totals
    };
    until("both users' totals", || async { items().await.len() == 2 && items().await["ana"].1 == "2" }).await;
    assert_eq!(items().await, BTreeMap::from([("ana".into(), ("19.5".into(), "2".into())), ("ben".into(), ("3.25".into(), "1".into()))]));
    until("both shards checkpointed", || async { checkpoints(&aws, &application).await.len() == 2 }).await;
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(log.iter().any(|l| l.contains("outputs written: totals=")), "the exit line counts the items");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_while_outputs_are_in_flight_loses_none_of_them() {
    swap_while_outputs_are_in_flight(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_of_four_instances_per_shard_while_outputs_are_in_flight_loses_none_of_them() {
    swap_while_outputs_are_in_flight(&["--parallelism", "4"]).await;
}

/// A SIGHUP swap from `forward` to `forward-v2` on 4 shards under a
/// producer, the worker started with `extra` flags.
async fn swap_while_outputs_are_in_flight(extra: &[&str]) {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let (input, output, application) = (unique("swapout-in"), unique("swapout-out"), unique("swapout-app"));
    let input = TestStream::create(&aws.kinesis, &input, 4).await;
    let output = TestStream::create(&aws.kinesis, &output, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(guest("forward"), &path).unwrap();
    // Output writes take 400 ms: the swap comes while some are queued or being written.
    let proxy = FaultProxy::start(&super::faults::upstream("KINESIS")).await;
    proxy.set(vec![Rule::every(Some("PutRecords"), Fault::Delay(Duration::from_millis(400)))]);
    let target = format!("out=kinesis:{}", output.name);
    let (path_arg, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let mut args = vec![
        "run", &path_arg, "--stream", &input.name, "--application", &application, "--worker-id", "w1",
        "--idle-time-between-reads", "200ms", "--cache-dir", &cache, "--output", &target, "--swap-canary-batches", "0",
    ];
    args.extend_from_slice(extra);
    let variable = "AWS_ENDPOINT_URL_KINESIS";
    let mut worker = KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, &[(variable, proxy.endpoint.as_str())]);
    let producer = Producer::start(&input, "s", Duration::from_millis(100)).await;
    worker.wait_for("records forwarded by v1", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 40).await;
    std::fs::copy(guest("forward-v2"), &path).unwrap();
    worker.signal(SIGHUP);
    worker.wait_for("every shard swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= 4).await;
    worker.wait_for("records forwarded by v2", LIMIT, |log| count_lines(log, "(kcl-test-guest-forward@2.0.0)") >= 40).await;
    let produced = producer.stop().await;
    let ins = input.read_all().await;
    assert_eq!(ins.len(), produced.len());
    all_forwarded(&ins, &output, &aws, &application, &worker).await;
    let outs = forwarded(&data(&output.read_all().await));
    assert!(behind_checkpoint(&ins, &checkpoints(&aws, &application).await, &outs).is_empty());
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(log.iter().any(|l| l.contains("-> ") && l.contains("kcl-test-guest-forward@2.0.0")), "the exit line names both versions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_and_dead_letters_follow_a_reshard_and_no_checkpoint_is_ever_ahead_of_them() {
    let aws = clients().await;
    let (input, output, dlq, application) = (unique("split-in"), unique("split-out"), unique("split-dlq"), unique("split-app"));
    let input = TestStream::create(&aws.kinesis, &input, 1).await;
    let output = TestStream::create(&aws.kinesis, &output, 1).await;
    let dlq = TestStream::create(&aws.kinesis, &dlq, 1).await;
    let parent = input.shards().await[0].id.clone();
    // The parent holds a record the guest traps on: it is isolated and dead-lettered before SHARD_END.
    let mut before = payloads("parent", 30);
    before[17] = "trap".into();
    input.put(&parent, &before).await;
    let (target, on_failure) = (format!("out=kinesis:{}", output.name), format!("kinesis:{}", dlq.name));
    let flags = ["--output", &target, "--on-failure", &on_failure, "--bisect-on-error", "--max-retry-attempts", "1", "--retry-backoff", "50ms"];
    let mut worker = start_with("forward", &input.name, &application, "w1", &flags);
    worker.wait_for("the parent's records forwarded", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 29).await;
    let children = input.split(&parent).await;
    for child in &children {
        input.put(child, &payloads(child, 20)).await;
    }
    let ins: Vec<StreamRecord> = input.read_all().await.into_iter().filter(|r| r.data != "trap").collect();
    assert_eq!(ins.len(), 29 + 40);
    all_forwarded(&ins, &output, &aws, &application, &worker).await;
    let lease_rows = leases(&aws.dynamodb, &application).await;
    assert_eq!(lease(&lease_rows, &parent).checkpoint, Checkpoint::ShardEnd, "the parent ended past its dead letter");
    let letters: Vec<Value> = dlq.read_all().await.iter().map(|r| serde_json::from_str(&r.data).unwrap()).collect();
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0]["shard"], parent.as_str());
    let outs = forwarded(&data(&output.read_all().await));
    assert!(behind_checkpoint(&ins, &checkpoints(&aws, &application).await, &outs).is_empty(), "no checkpoint ahead of its outputs");
    assert!(ins.iter().all(|r| outs.get(&(r.shard.clone(), r.sequence_number.clone())) == Some(&1)), "each forwarded once: {outs:?}");
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
}
