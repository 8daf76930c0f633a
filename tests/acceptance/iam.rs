//! `kcl-host iam-policy`: every request a worker makes — seen by the fault
//! proxies in front of both servers, from start to a graceful stop — is
//! allowed by the policy the command prints for the same arguments, in the
//! plain, fan-out, outputs with a failure target, state, multi-stream and
//! DynamoDB Streams configurations; and no statement grants a bare `*`
//! (but `dynamodb:ListStreams`, which names no resource).

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;
use kcl_testkit::faults::FaultProxy;
use kcl_testkit::iam::allows;
use kcl_testkit::java_kcl3;
use serde_json::Value;

use super::outputs::checkpoints;
use super::*;

/// One configuration under test.
struct Setup<'a> {
    guest: &'a str,
    streams: Vec<&'a TestStream>,
    application: String,
    /// Flags beyond the streams and the application, as given to both `run` and `iam-policy`.
    flags: Vec<String>,
    /// The worker's DynamoDB is the kit's moto (transactions), not dynalite.
    on_moto: bool,
}

/// The policy `kcl-host iam-policy` prints for `setup`, in `region` and `account`.
async fn policy(setup: &Setup<'_>, region: &str, account: &str) -> Value {
    let processor = guest(setup.guest);
    let mut args = vec!["iam-policy", &processor, "--application", &setup.application, "--region", region, "--account-id", account];
    for stream in &setup.streams {
        args.extend(["--stream", &stream.name]);
    }
    args.extend(setup.flags.iter().map(String::as_str));
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kcl-host")).args(&args).output().await.expect("kcl-host runs");
    assert!(output.status.success(), "iam-policy failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("the policy is JSON")
}

/// Runs `setup`'s worker behind proxies until `produce`'s records are all
/// checkpointed, stops it with SIGTERM, then checks every request against
/// the policy; returns the actions seen.
async fn every_request_is_allowed(setup: Setup<'_>, produce: impl AsyncFnOnce()) -> BTreeSet<String> {
    let aws = if setup.on_moto { java_kcl3::clients().await } else { clients().await };
    let server = |variable: &str| std::env::var(variable).expect("the servers' variables (.servers/env)");
    let upstream = if setup.on_moto { java_kcl3::dynamodb_endpoint() } else { server("AWS_ENDPOINT_URL_DYNAMODB") };
    let kinesis = FaultProxy::start(&server("AWS_ENDPOINT_URL_KINESIS")).await;
    let dynamodb = FaultProxy::start(&upstream).await;
    let stream_names: Vec<&str> = setup.streams.iter().map(|s| s.name.as_str()).collect();
    let mut flags: Vec<&str> = vec!["--kinesis-endpoint", &kinesis.endpoint, "--dynamodb-endpoint", &dynamodb.endpoint];
    for name in &stream_names[1..] {
        flags.extend(["--stream", name]);
    }
    flags.extend(setup.flags.iter().map(String::as_str));
    let mut worker = start_with(setup.guest, stream_names[0], &setup.application, "w1", &flags);
    worker.wait_for("the first lease pass", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;
    produce().await;

    // Until the last record of every shard of every stream is checkpointed,
    // or logged by the guest (the counter checkpoints every 100 records).
    let mut lasts = BTreeSet::new();
    for stream in &setup.streams {
        let mut last_of: BTreeMap<String, String> = BTreeMap::new();
        for record in stream.read_all().await {
            last_of.insert(record.shard, record.sequence_number);
        }
        lasts.extend(last_of.into_values());
    }
    let deadline = tokio::time::Instant::now() + 2 * LIMIT;
    loop {
        let mut at: BTreeSet<String> = checkpoints(&aws, &setup.application).await.into_values().collect();
        at.extend(worker.delivered().await.into_iter().map(|d| d.sequence_number));
        if lasts.is_subset(&at) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not every shard's last record processed: {lasts:?} vs {at:?}; log: {:#?}", worker.log().await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));

    let region = server("AWS_REGION");
    let described = aws.kinesis.describe_stream_summary().stream_name(stream_names[0]).send().await.expect("DescribeStreamSummary");
    let stream_arn = described.stream_description_summary.expect("a summary").stream_arn;
    let account = stream_arn.split(':').nth(4).expect("an ARN names its account").to_owned();
    let policy = policy(&setup, &region, &account).await;
    let mut resources = policy["Statement"].as_array().expect("statements").iter().flat_map(|s| s["Resource"].as_array().expect("a list of resources"));
    assert!(resources.all(|r| r.as_str().is_some_and(|r| r.starts_with("arn:aws:"))), "every resource an ARN, none a bare `*`: {policy:#}");
    let arn = |service: &str, name: &str| match (name.starts_with("arn:"), service) {
        (true, _) => name.to_owned(),
        (false, "dynamodb") => format!("arn:aws:dynamodb:{region}:{account}:table/{name}"),
        (false, _) => format!("arn:aws:kinesis:{region}:{account}:stream/{name}"),
    };

    let mut actions = BTreeSet::new();
    let mut refused = BTreeSet::new();
    for seen in kinesis.counts().requests.into_iter().chain(dynamodb.counts().requests) {
        for needed in seen.authorizations {
            let service = needed.action.split(':').next().unwrap_or_default().to_owned();
            // A request naming no stream (a shard iterator, a page token) reads one of the worker's streams.
            let resources: Vec<String> = match &needed.resource {
                Some(name) => vec![arn(&service, name)],
                None => stream_names.iter().map(|s| arn(&service, s)).collect(),
            };
            if resources.iter().any(|r| !allows(&policy, &needed.action, r)) {
                refused.insert(format!("{} on {resources:?}", needed.action));
            }
            actions.insert(needed.action);
        }
    }
    assert!(refused.is_empty(), "requests the policy does not allow: {refused:#?}\npolicy: {policy:#}");
    eprintln!("{} actions, each allowed: {actions:?}", actions.len());
    actions
}

fn setup<'a>(guest: &'a str, streams: Vec<&'a TestStream>, prefix: &str, flags: &[&str]) -> Setup<'a> {
    Setup { guest, streams, application: unique(prefix), flags: flags.iter().map(|f| f.to_string()).collect(), on_moto: false }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_worker_through_a_split_needs_nothing_its_policy_does_not_grant() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("iam-plain"), 2).await;
    let setup = setup("counter", vec![&stream], "iam-plain-app", &[]);
    let actions = every_request_is_allowed(setup, async || {
        let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
        stream.put(&shards[0], &payloads("before", 20)).await;
        for child in stream.split(&shards[0]).await {
            stream.put(&child, &payloads("after", 10)).await;
        }
    })
    .await;
    for action in ["kinesis:GetRecords", "kinesis:ListShards", "dynamodb:Scan", "dynamodb:UpdateItem"] {
        assert!(actions.contains(action), "{action} was called: {actions:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_worker_needs_nothing_its_policy_does_not_grant() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("iam-fanout"), 2).await;
    let setup = setup("counter", vec![&stream], "iam-fanout-app", &["--retrieval", "fanout"]);
    let actions = every_request_is_allowed(setup, async || {
        for shard in stream.shards().await {
            stream.put(&shard.id, &payloads("r", 10)).await;
        }
    })
    .await;
    assert!(actions.contains("kinesis:SubscribeToShard") && !actions.contains("kinesis:GetRecords"), "{actions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_outputs_and_a_failure_table_needs_nothing_its_policy_does_not_grant() {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let aws = clients().await;
    let (input, out) = (TestStream::create(&aws.kinesis, &unique("iam-out-in"), 2).await, TestStream::create(&aws.kinesis, &unique("iam-out"), 1).await);
    // Dead letters are JSON objects: the table is keyed by their sequence number.
    let letters = unique("iam-dlq");
    kcl_testkit::create_table(&aws.dynamodb, &letters, &[("sequence_number", ScalarAttributeType::S)]).await;
    let (output, on_failure) = (format!("out=kinesis:{}", out.name), format!("dynamodb:{letters}"));
    let flags = ["--output", &output, "--on-failure", &on_failure, "--bisect-on-error", "--max-retry-attempts", "1", "--retry-backoff", "50ms"];
    let setup = setup("forward", vec![&input], "iam-out-app", &flags);
    let actions = every_request_is_allowed(setup, async || {
        let shards: Vec<String> = input.shards().await.into_iter().map(|s| s.id).collect();
        input.put(&shards[0], &["a".into(), "fail".into(), "b".into()]).await;
        input.put(&shards[1], &payloads("c", 5)).await;
    })
    .await;
    let scan = aws.dynamodb.scan().table_name(&letters).send().await.expect("Scan");
    assert_eq!(scan.count(), 1, "the poison record's dead letter is in the table");
    assert!(actions.contains("kinesis:PutRecords") && actions.contains("dynamodb:BatchWriteItem"), "{actions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_committing_state_through_its_redo_log_needs_nothing_its_policy_does_not_grant() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("iam-state"), 1).await;
    // Moto: the state commits are transactions. 150 users in one batch
    // take more than one transaction: the redo log.
    let setup = Setup { on_moto: true, ..setup("user-totals", vec![&stream], "iam-state-app", &[]) };
    let actions = every_request_is_allowed(setup, async || {
        let purchases: Vec<(String, String)> = (0..150).map(|u| (format!(r#"{{"cents": {u}}}"#), format!("user-{u:03}"))).collect();
        let records: Vec<(&[u8], &str)> = purchases.iter().map(|(data, user)| (data.as_bytes(), user.as_str())).collect();
        stream.put_by_key(&records).await;
    })
    .await;
    for action in ["dynamodb:ConditionCheckItem", "dynamodb:BatchGetItem", "dynamodb:PutItem"] {
        assert!(actions.contains(action), "{action} was called: {actions:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_two_streams_needs_nothing_its_policy_does_not_grant() {
    let aws = clients().await;
    let (a, b) = (TestStream::create(&aws.kinesis, &unique("iam-multi-a"), 1).await, TestStream::create(&aws.kinesis, &unique("iam-multi-b"), 2).await);
    let setup = setup("counter", vec![&a, &b], "iam-multi-app", &[]);
    every_request_is_allowed(setup, async || {
        for stream in [&a, &b] {
            for shard in stream.shards().await {
                stream.put(&shard.id, &payloads("r", 5)).await;
            }
        }
    })
    .await;
}

/// A worker of a DynamoDB table's stream (`--dynamodb-table`), its table,
/// stream and lease tables all behind one proxy in front of moto.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_a_tables_stream_needs_nothing_its_policy_does_not_grant() {
    let aws = java_kcl3::clients().await;
    let table = unique("iam-orders");
    let stream_arn = kcl_testkit::tables::table_with_stream(&aws.dynamodb, &table).await;
    for sk in 0..20 {
        let item = [("pk", AttributeValue::S("account-1".into())), ("sk", AttributeValue::N(sk.to_string())), ("amount", AttributeValue::N("5".into()))];
        aws.dynamodb.put_item().table_name(&table).set_item(Some(item.map(|(k, v)| (k.to_owned(), v)).into())).send().await.expect("PutItem");
    }
    let proxy = FaultProxy::start(&java_kcl3::dynamodb_endpoint()).await;
    let application = unique("iam-cdc-app");
    let (processor, cache) = (guest("table-totals"), kcl_testkit::test_cache_dir().display().to_string());
    let args = ["run", &processor, "--dynamodb-table", &table, "--application", &application, "--cache-dir", &cache, "--idle-time-between-reads", "200ms"];
    let env = [("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint.as_str()), ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", proxy.endpoint.as_str())];
    let mut worker = KclHost::spawn_with_env(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args, &env);
    worker.wait_for("every change committed", LIMIT, |log| log.iter().filter_map(|l| l.split_once("committed ")?.1.split(' ').next()?.parse::<usize>().ok()).sum::<usize>() >= 20).await;
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));

    let (region, account) = ("us-east-1", stream_arn.split(':').nth(4).expect("an ARN names its account"));
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kcl-host"))
        .args(["iam-policy", &processor, "--dynamodb-table", &table, "--application", &application, "--region", region, "--account-id", account])
        .output()
        .await
        .expect("kcl-host runs");
    assert!(output.status.success(), "iam-policy failed: {}", String::from_utf8_lossy(&output.stderr));
    let policy: Value = serde_json::from_slice(&output.stdout).expect("the policy is JSON");
    let mut actions = BTreeSet::new();
    let mut refused = BTreeSet::new();
    for needed in proxy.counts().requests.into_iter().flat_map(|seen| seen.authorizations) {
        // A request naming nothing (a shard iterator, ListStreams) reads the table's stream.
        let resource = match needed.resource.as_deref() {
            Some(arn) if arn.starts_with("arn:") => arn.to_owned(),
            Some(table) => format!("arn:aws:dynamodb:{region}:{account}:table/{table}"),
            None => stream_arn.clone(),
        };
        if !allows(&policy, &needed.action, &resource) {
            refused.insert(format!("{} on {resource}", needed.action));
        }
        actions.insert(needed.action);
    }
    assert!(refused.is_empty(), "requests the policy does not allow: {refused:#?}\npolicy: {policy:#}");
    eprintln!("{} actions, each allowed: {actions:?}", actions.len());
    for action in ["dynamodb:ListStreams", "dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords", "dynamodb:UpdateItem"] {
        assert!(actions.contains(action), "{action} was called: {actions:?}");
    }
}
