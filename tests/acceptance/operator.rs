//! What an operator sees and types: bad input, --help, /metrics and
//! `kcl-host status`.

use kcl_testkit::http_sink::{HttpSink, Mode};

use super::*;

#[tokio::test]
async fn bad_input_gets_one_clear_message_and_a_non_zero_exit() {
    let aws = clients().await;
    let counter = guest("counter");
    let aggregate = guest("json-aggregate");
    let missing_stream = unique("no-such-stream");
    let table = unique("untouched-table");
    let not_wasm = std::env::temp_dir().join(format!("{}.wasm", unique("not-wasm")));
    std::fs::write(&not_wasm, "not a component").unwrap();
    let not_wasm = not_wasm.display().to_string();
    let no_stream = format!("Kinesis stream `{missing_stream}` does not exist in this account and region; check --stream and AWS_REGION (looked in region `us-east-1` at `http");
    // A table keyed otherwise (a control table), and one that does not exist, given to `status`.
    let other = unique("not-a-lease-table");
    kcl_host::lease::heartbeat::HeartbeatTable::new(aws.dynamodb.clone(), &other).ensure().await.unwrap();
    let other = format!("{other}-KclHostControl");
    let no_table = unique("no-such-table");
    let long_application = "a".repeat(250);
    // (arguments, environment, what the message must say)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (vec!["run", &counter, "--application", "app"], vec![], "`stream` is required: pass --stream, set KCL_HOST_STREAM"),
        (vec!["run", &counter, "--stream", &missing_stream, "--application", &table], vec![], &no_stream),
        (
            vec!["run", &counter, "--stream", "s", "--application", "app"],
            vec![("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:9")],
            "the endpoint is `http://127.0.0.1:9`, from AWS_ENDPOINT_URL_KINESIS",
        ),
        (
            vec!["run", &aggregate, "--stream", "s", "--application", "app", "--memory-limit-mib", "1"],
            vec![],
            "more than the memory limit of 1 MiB; raise --memory-limit-mib",
        ),
        (vec!["run", &not_wasm, "--stream", "s", "--application", "app"], vec![], "is not a WebAssembly file"),
        (vec!["run", &counter, "--stream", "s", "--application", "app", "--initial-position", "OLDEST"], vec![], "use TRIM_HORIZON, LATEST or AT_TIMESTAMP"),
        (vec!["run", &counter, "--stream", "s", "--application", "app", "--retrieval", "push"], vec![], "use polling (GetRecords) or fanout"),
        (vec!["status", "--application", &other], vec![], "is keyed by `key` (HASH), not by `leaseKey` (HASH), so it is not a lease table"),
        (vec!["status", "--application", &no_table], vec![], "does not exist"),
        (
            vec!["run", &counter, "--stream", "s", "--application", "app"],
            vec![
                ("AWS_ACCESS_KEY_ID", ""),
                ("AWS_SECRET_ACCESS_KEY", ""),
                ("AWS_EC2_METADATA_DISABLED", "true"),
                ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
                ("AWS_CONFIG_FILE", "/nonexistent"),
            ],
            "no AWS credentials were found for DescribeStreamSummary (looked in the environment",
        ),
        (vec!["run", &counter, "--stream", "s", "--application", &long_application], vec![], "use 3 to 237 characters (it names the lease table"),
        (vec!["run", &counter, "--stream", "s", "--application", "app", "--idle-time-between-reads", "-1s"], vec![], "use a duration with a unit"),
        (vec!["run", &counter, "--stream", "arn:aws:sqs:us-east-2:1:q", "--application", "app"], vec![], "give a Kinesis stream's name or ARN"),
        (vec!["replay", &counter, "--input", "-", "--batch-size", "0"], vec![], "0 is not in 1.."),
        (vec!["init", ".", "--lang", "rust"], vec![], "`.` names no new directory"),
        (vec!["run", &counter, "--stream", "s", "--application", "app"], vec![("KCL_HOST_MAX_RECORDS", "lots")], "KCL_HOST_MAX_RECORDS=\"lots\" is not valid"),
    ];
    for (args, env, expected) in cases {
        let (code, text) = run_to_exit(&args, &env).await;
        assert_ne!(code, 0, "{args:?} should fail:\n{text}");
        assert!(text.contains(expected), "{args:?} should say {expected:?}:\n{text}");
    }
    let tables = aws.dynamodb.list_tables().send().await.unwrap();
    assert!(!tables.table_names().contains(&table), "a bad stream name creates no lease table");
    // No region: one line that says what to do, not three instance-metadata warnings first.
    let no_region = [("AWS_REGION", ""), ("AWS_DEFAULT_REGION", ""), ("AWS_CONFIG_FILE", "/nonexistent")];
    let (code, text) = run_to_exit(&["run", &counter, "--stream", "s", "--application", "app"], &no_region).await;
    assert_ne!(code, 0);
    assert!(text.contains("no AWS region is configured; set AWS_REGION or pass --region") && !text.contains("IMDS"), "{text}");
    // No credentials, and instance metadata that refuses: one message that
    // says so, not the SDK's provider warnings and "cannot reach DynamoDB".
    let imds = HttpSink::start().await;
    imds.set_mode(Mode::Forbidden);
    let imds_endpoint = format!("http://{}", imds.address());
    let no_credentials = [
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds_endpoint.as_str()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ("AWS_CONFIG_FILE", "/dev/null"),
    ];
    let (code, text) = run_to_exit(&["run", &counter, "--stream", "s", "--application", "app"], &no_credentials).await;
    assert_ne!(code, 0);
    assert!(!imds.requests().is_empty(), "the SDK asked instance metadata");
    assert!(text.contains("no AWS credentials were found for DescribeStreamSummary") && text.contains("the last to fail said: ") && text.contains("IMDS"), "{text}");
    assert!(!text.contains("WARN") && !text.contains("cannot reach"), "{text}");
}

#[tokio::test]
async fn help_says_what_the_code_does() {
    let (code, run) = run_to_exit(&["run", "--help"], &[]).await;
    assert_eq!(code, 0, "{run}");
    for variable in ["KCL_HOST_WATCH", "KCL_HOST_SWAP_CANARY_INPUT"] {
        assert!(run.contains(&format!("[env: {variable}=]")), "run --help names {variable}:\n{run}");
    }
    assert!(run.contains("a second one stops at once"), "{run}");
    let (code, deploy) = run_to_exit(&["deploy", "--help"], &[]).await;
    assert_eq!(code, 0, "{deploy}");
    assert!(deploy.contains("stored in DynamoDB") && !deploy.contains("shared volume"), "{deploy}");
}

/// What `kcl-host --version` prints after the name: the version, the
/// commit of this checkout, the contract versions.
async fn version() -> String {
    let (code, text) = run_to_exit(&["--version"], &[]).await;
    assert_eq!(code, 0, "{text}");
    let version = text.trim().strip_prefix("kcl-host ").expect("the name first").to_owned();
    let git = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().expect("git runs");
    let head = String::from_utf8_lossy(&git.stdout).trim().to_owned();
    let expected = format!("{} (commit {head}", env!("CARGO_PKG_VERSION"));
    assert!(version.starts_with(&expected), "`{version}` names {expected}");
    assert!(version.ends_with(", contracts kcl:processor 0.1.0, 0.2.0, 0.3.0, 0.4.0)"), "{version}");
    version
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_what_a_worker_processed_and_drop_a_shard_it_gave_away() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("metrics"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    for shard in &shards {
        stream.put(shard, &payloads(shard, 7)).await;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let application = unique("metrics-app");
    let flags = ["--failover-time", "1s", "--admin-listen", address.as_str()];
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &flags);
    first.wait_for("14 records", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 14).await;

    // The guest logs a record during its call; the metric counts it once the call returns.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let (status, text) = loop {
        let (status, text) = http_get(&address, "/metrics").await;
        let counted = shards.iter().all(|s| series(&text, "kcl_host_records_processed_total", Some(s)) == Some(7.0));
        if counted || tokio::time::Instant::now() > deadline {
            break (status, text);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.ends_with("200 OK"), "{status}");
    for shard in &shards {
        assert_eq!(series(&text, "kcl_host_records_processed_total", Some(shard)), Some(7.0), "{text}");
        assert!(series(&text, "kcl_host_processor_version", Some(shard)) == Some(1.0), "{text}");
    }
    assert_eq!(series(&text, "kcl_host_leases_held", None), Some(2.0), "{text}");
    assert_eq!(series(&text, "kcl_host_leases_taken_total", None), Some(2.0), "{text}");
    assert!(text.contains(r#"stream=""#) && text.contains(r#"worker="worker-1""#), "{text}");
    assert_eq!(http_get(&address, "/healthz").await.0.split(' ').nth(1), Some("200"));
    // The same version string in --version, the start line and the metrics.
    let version = version().await;
    assert!(first.log().await[0].contains(&format!("kcl-host {version}: worker worker-1 consuming")), "{:?}", first.log().await[0]);
    let build = text.lines().find(|l| l.starts_with("kcl_host_build_info{")).unwrap_or_else(|| panic!("a build_info series: {text}"));
    assert!(build.contains(&format!(r#"version="{version}""#)) && build.ends_with(" 1"), "{build}");

    // A second worker joins: the first gives one shard back, and its series go.
    let mut second = start_with("counter", &stream.name, &application, "worker-2", &["--failover-time", "1s"]);
    first.wait_for("a lease given back", LIMIT, |log| count_lines(log, "gave the lease back") >= 1).await;
    second.wait_for("its shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    let log = first.log().await;
    let given = log.iter().find(|l| l.contains("gave the lease back")).unwrap().rsplit_once("shard=").unwrap().1.trim_matches('"').to_owned();
    let kept: Vec<&String> = shards.iter().filter(|s| **s != given).collect();
    let (_, text) = http_get(&address, "/metrics").await;
    assert!(!text.contains(&format!("shard=\"{given}\"")), "the given-back shard's series are gone:\n{text}");
    assert_eq!(series(&text, "kcl_host_records_processed_total", Some(kept[0])), Some(7.0), "{text}");
    assert_eq!(series(&text, "kcl_host_leases_held", None), Some(1.0), "{text}");
    let (a, log_a) = first.interrupt().await;
    let (b, log_b) = second.interrupt().await;
    assert!(a.success() && b.success(), "{}\n{}", log_a.join("\n"), log_b.join("\n"));
}

#[tokio::test]
async fn status_shows_each_kind_of_row_in_text_and_json() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let aws = clients().await;
    let application = unique("status-app");
    let seq = "49590338271490256608559692538361571095921575989136588898";
    let row = |key: &str, owner: Option<&str>, checkpoint: Checkpoint, parents: &[&str]| Lease {
        owner: owner.map(str::to_owned),
        counter: 41,
        ..Lease::new(key, checkpoint, parents.iter().map(|p| p.to_string()).collect())
    };
    let rows = [
        row("a-finished", None, Checkpoint::ShardEnd, &[]),
        row("b-open", Some("kcl-1"), Checkpoint::TrimHorizon, &[]),
        row("c-child", None, Checkpoint::TrimHorizon, &["b-open"]),
        row("d-free", None, Checkpoint::Latest, &[]),
        // As Java KCL writes it: an owner with no heartbeat row, a checkpoint inside an aggregate.
        row("e-java", Some("java-host:1234"), Checkpoint::parse(seq, 3).unwrap(), &[]),
        row("f-stale", Some("kcl-dead"), Checkpoint::TrimHorizon, &[]),
    ];
    write_leases(&aws.dynamodb, &application, &rows).await;
    let control = kcl_host::lease::heartbeat::HeartbeatTable::new(aws.dynamodb.clone(), &application);
    control.ensure().await.unwrap();
    let running = kcl_host::swap::Version { hash: "abc".into(), source: "/p.wasm".into(), component: Some("orders@1.3.0".into()) };
    control.beat("kcl-1", "test pid 1", true, &running.report()).await.unwrap();
    let wanted = kcl_host::swap::Version { hash: "def".into(), source: "/q.wasm".into(), component: None };
    kcl_host::swap::deploy::DeployRow::new(aws.dynamodb.clone(), &application).write(&wanted, Some(&running)).await.unwrap();
    let long_ago = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() - 60_000;
    aws.dynamodb
        .put_item()
        .table_name(format!("{application}-KclHostControl"))
        .item("key", AttributeValue::S("worker/kcl-dead".into()))
        .item("heartbeat", AttributeValue::N("7".into()))
        .item("beatMillis", AttributeValue::N(long_ago.to_string()))
        .send()
        .await
        .unwrap();

    let (code, text) = run_to_exit(&["status", "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    let state = |shard: &str| -> String {
        let line = text.lines().find(|l| l.starts_with(shard)).unwrap_or_else(|| panic!("no {shard} in:\n{text}"));
        line.split_whitespace().nth(1).unwrap().to_owned()
    };
    assert_eq!(state("a-finished"), "SHARD_END");
    assert_eq!(state("b-open"), "processing");
    assert_eq!(state("c-child"), "waiting");
    assert_eq!(state("d-free"), "unassigned");
    assert_eq!(state("e-java"), "owned");
    assert_eq!(state("f-stale"), "expired");
    assert!(text.lines().any(|l| l.starts_with("e-java") && l.contains("/3") && l.contains("java-host:1234")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("java-host:1234") && l.contains("none (not kcl-host)")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("kcl-1 ") && l.ends_with(" abc (orders@1.3.0)")), "the version it runs: {text}");
    assert!(text.lines().any(|l| l == "deployed: def from /q.wasm, rollback to abc (orders@1.3.0)"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");

    let (code, json) = run_to_exit(&["status", "--application", &application, "--json"], &[]).await;
    assert_eq!(code, 0, "{json}");
    let report: serde_json::Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {json}"));
    let shards = report["shards"].as_array().unwrap();
    let by_name = |name: &str| shards.iter().find(|s| s["shard"] == name).unwrap().clone();
    assert_eq!(by_name("e-java")["state"], "owned");
    assert_eq!(by_name("e-java")["sub_sequence_number"], 3);
    assert_eq!(by_name("c-child")["state"], "waiting-for-parents");
    assert_eq!(by_name("f-stale")["state"], "expired");
    let workers = report["workers"].as_array().unwrap();
    assert!(workers.iter().any(|w| w["worker"] == "kcl-1" && w["leases"] == 1 && w["heartbeat_age_ms"].is_u64() && w["processor"] == "abc (orders@1.3.0)"), "{json}");
    assert_eq!(report["deployed"]["processor"], "def", "{json}");
}
