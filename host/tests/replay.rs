//! `kcl-host replay` as a user runs it: every example on the sample file.

mod support;

use std::process::Command;

use support::guest;

fn replay(processor: &str, args: &[&str]) -> (i32, String, String) {
    replay_file(processor, concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/records.jsonl"), args)
}

fn replay_file(processor: &str, input: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kcl-host"))
        .arg("replay")
        .arg(guest(processor))
        .args(["--input", input, "--cache-dir"]).arg(support::test_cache_dir())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("kcl-host runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn every_example_replays_the_sample() {
    for example in ["noop", "counter", "json-aggregate", "go-counter", "go-json-aggregate", "py-counter", "py-json-aggregate", "js-counter", "js-json-aggregate"] {
        let (code, stdout, stderr) = replay(example, &["--batch-size", "2"]);
        assert_eq!(code, 0, "{example}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("replayed 5 records in 3 batches"), "{example}: {stdout}");
    }
}

#[test]
fn a_get_records_page_and_a_lambda_event_replay_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.json");
    // As `aws kinesis get-records` prints it (AWS CLI v2).
    std::fs::write(&page, r#"{
    "Records": [
        {"SequenceNumber": "49590338271490256608559692538361571095921575989136588898", "ApproximateArrivalTimestamp": "2026-12-06T10:00:00.000000+00:00", "Data": "b25l", "PartitionKey": "a"},
        {"SequenceNumber": "49590338271490256608559692538361571095921575989136588899", "ApproximateArrivalTimestamp": "2026-12-06T10:00:01.000000+00:00", "Data": "dHdv", "PartitionKey": "b"}
    ],
    "NextShardIterator": "AAAAAAAA",
    "MillisBehindLatest": 0
}"#).unwrap();
    let (code, stdout, stderr) = replay_file("counter", page.to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("replayed 2 records in 1 batches"), "{stdout}");
    assert!(stderr.contains("record 49590338271490256608559692538361571095921575989136588899 b two"), "{stderr}");

    let event = dir.path().join("event.json");
    std::fs::write(&event, r#"{"Records": [{"kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": "1", "sequenceNumber": "49590338271490256608559692538361571095921575989136588898", "data": "dGhyZWU=", "approximateArrivalTimestamp": 1545084650.987}, "eventSource": "aws:kinesis", "eventID": "shardId-000000000006:49590338271490256608559692538361571095921575989136588898"}]}"#).unwrap();
    let (code, stdout, stderr) = replay_file("counter", event.to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("replayed 1 records in 1 batches") && stderr.contains(" three"), "{stdout}\n{stderr}");
}

#[test]
fn expect_is_a_golden_test_of_sends_checkpoints_and_state() {
    let dir = tempfile::tempdir().unwrap();
    let (input, expected) = (dir.path().join("purchases.jsonl"), dir.path().join("expected.jsonl"));
    let purchases = |bob: u32| format!("{{\"data\": \"{{\\\"user\\\": \\\"alice\\\", \\\"cents\\\": 250}}\", \"partition_key\": \"alice\"}}\n{{\"data\": \"{{\\\"user\\\": \\\"bob\\\", \\\"cents\\\": {bob}}}\", \"partition_key\": \"bob\"}}\n");
    std::fs::write(&input, purchases(100)).unwrap();
    let (input, expected_arg) = (input.to_str().unwrap(), expected.to_str().unwrap());
    let (code, stdout, stderr) = replay_file("user-totals", input, &["--expect", expected_arg, "--update-expected"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let written = std::fs::read_to_string(&expected).unwrap();
    assert!(written.contains(r#"{"state":"bob","value":"100"}"#) && written.contains(r#"{"checkpoint":"#), "{written}");
    let (code, stdout, _) = replay_file("user-totals", input, &["--expect", expected_arg]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("lines match"), "{stdout}");

    // Bob spends more: the state differs, and the diff says how.
    std::fs::write(dir.path().join("purchases.jsonl"), purchases(175)).unwrap();
    let (code, stdout, stderr) = replay_file("user-totals", input, &["--expect", expected_arg]);
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains(r#"-{"state":"bob","value":"100"}"#) && stderr.contains(r#"+{"state":"bob","value":"175"}"#), "{stderr}");
}

#[test]
fn a_component_built_for_wit_0_1_still_replays() {
    let (code, stdout, stderr) = replay("legacy-v0.1", &["--batch-size", "2"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("replayed 5 records in 3 batches") && stdout.contains("; 3 checkpoints"), "{stdout}");
}

#[test]
fn a_component_built_for_wit_0_2_still_replays() {
    let (code, stdout, stderr) = replay("legacy-v0.2", &["--batch-size", "2"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("replayed 5 records in 3 batches") && stdout.contains("; 5 checkpoints"), "{stdout}");
    assert_eq!(stderr.matches("kcl_host::guest: record ").count(), 5, "{stderr}");
    assert!(stderr.contains("shutdown ShutdownReason::ShardEnd"), "{stderr}");
}

#[test]
fn a_component_built_for_wit_0_3_still_replays_and_sends_outputs() {
    let (code, stdout, stderr) = replay("legacy-v0.3", &["--batch-size", "2", "--output", "out=stdout"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("replayed 5 records in 3 batches") && stdout.contains("; 3 checkpoints"), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("out {\"partition_key\":")).count(), 5, "{stdout}");
    assert_eq!(stderr.matches("kcl_host::guest: sent ").count(), 3, "{stderr}");
}

/// State in a replay: committed with each checkpoint, saved to the file,
/// and read back by the next replay (so the totals double, exactly).
/// The Rust user-totals and its Python and JavaScript ports (their SDKs'
/// `state`): the same totals in the same file, each run reading what the
/// last one left, whichever language wrote it — past 2^53 too.
#[test]
fn replay_keeps_state_in_a_file_that_the_next_replay_reads_in_every_sdk() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("purchases.jsonl");
    let lines = [("ana", 1250), ("ben", 300), ("ana", 5), ("cy", 1), ("dan", 2)];
    let text: Vec<String> = lines.iter().map(|(user, cents)| serde_json::json!({ "data": format!("{{\"cents\": {cents}}}"), "partition_key": user }).to_string()).collect();
    std::fs::write(&input, text.join("\n") + "\n{\"data\": \"not a purchase\", \"partition_key\": \"ana\"}\n").unwrap();
    let state = dir.path().join("state.json");
    // Dan starts past 2^53, where a JavaScript Number is no longer exact.
    let big: i64 = (1 << 53) + 1;
    std::fs::write(&state, serde_json::json!({ "dan": big.to_string() }).to_string()).unwrap();
    let args = ["--batch-size", "2", "--state", state.to_str().unwrap()];
    for (round, guest_name) in ["user-totals", "py-user-totals", "js-user-totals"].into_iter().enumerate() {
        let round = round as i64 + 1;
        let (code, stdout, stderr) = replay_file(guest_name, input.to_str().unwrap(), &args);
        assert_eq!(code, 0, "{guest_name}: {stdout}\n{stderr}");
        assert!(stdout.contains("checkpoint ") && stdout.contains("(state: 2 keys changed)"), "{guest_name}: {stdout}");
        assert!(stdout.contains("state: 4 keys saved to"), "{guest_name}: {stdout}");
        let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
        let expected = serde_json::json!({ "ana": (1255 * round).to_string(), "ben": (300 * round).to_string(), "cy": round.to_string(), "dan": (big + 2 * round).to_string() });
        assert_eq!(saved, expected, "after {guest_name}");
    }
}

#[test]
fn a_kpl_aggregate_replays_as_its_user_records() {
    use base64::Engine as _;
    let users = ["one", "two", "three"];
    let aggregate = kcl_host::records::kpl::encode(users.iter().map(|u| ("k", None, u.as_bytes())));
    let line = serde_json::json!({ "data_base64": base64::engine::general_purpose::STANDARD.encode(&aggregate), "sequence_number": "7" });
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), format!("{line}\n{}\n", serde_json::json!({ "data": "plain", "sequence_number": "8" }))).unwrap();
    let (code, stdout, stderr) = replay_file("counter", input.path().to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let records: Vec<&str> = stderr.lines().filter_map(|l| l.split_once("kcl_host::guest: record ")).map(|(_, r)| r).collect();
    assert_eq!(records.len(), 4, "{stderr}");
    assert!(records[0].starts_with("7 k one") && records[2].starts_with("7 k three") && records[3].starts_with("8 "), "{records:?}");
}

/// The host cuts a batch's string columns at UTF-8 byte offsets; an SDK that
/// cut them as its own string indices would misplace every key after a
/// non-ASCII one.
#[test]
fn every_sdk_reads_non_ascii_partition_keys_as_written() {
    let keys = ["ascii", "schlüssel", "日本語のキー", "emoji-🦀", "last"];
    let lines: String = keys.iter().map(|k| format!("{}\n", serde_json::json!({ "data": format!("to {k}"), "partition_key": k }))).collect();
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), lines).unwrap();
    for counter in ["counter", "go-counter", "py-counter", "js-counter"] {
        let (code, stdout, stderr) = replay_file(counter, input.path().to_str().unwrap(), &[]);
        assert_eq!(code, 0, "{counter}: {stdout}\n{stderr}");
        let records: Vec<&str> = stderr.lines().filter_map(|l| l.split_once("kcl_host::guest: record ")).map(|(_, r)| r).collect();
        assert_eq!(records.len(), keys.len(), "{counter}: {stderr}");
        for (record, key) in records.iter().zip(keys) {
            // "SEQUENCE KEY DATA shard=..."
            let fields: Vec<&str> = record.split(' ').collect();
            assert_eq!(fields[1..4], [key, "to", key], "{counter}: {record}");
        }
    }
}

#[test]
fn json_logs_are_one_object_per_line_with_the_shard_as_a_field() {
    let (code, stdout, stderr) = replay("counter", &["--log-format", "json", "--shard-id", "shardId-000000000007"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let records: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with("record "))).collect();
    assert_eq!(records.len(), 5, "{stderr}");
    for record in records {
        assert_eq!(record["shard"], "shardId-000000000007", "{record}");
        assert_eq!(record["target"], "kcl_host::guest", "{record}");
        assert_eq!(record["level"], "INFO", "{record}");
    }
}

#[test]
fn the_aggregates_checkpoint_each_batch_and_total_per_user() {
    for example in ["json-aggregate", "go-json-aggregate", "py-json-aggregate", "js-json-aggregate"] {
        check_aggregate(example);
    }
}

fn check_aggregate(example: &str) {
    let (code, stdout, stderr) = replay(example, &["--batch-size", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let checkpoints: Vec<&str> = stdout.lines().filter(|l| l.starts_with("checkpoint ")).collect();
    assert_eq!(checkpoints.len(), 3, "one per batch: {stdout}");
    assert!(checkpoints[2].ends_with("00005"), "the last record: {stdout}");
    assert!(stderr.contains("total ana 19.50") && stderr.contains("total ben 3.25"), "{stderr}");
    assert!(stderr.contains("3 purchases, 1 rejected, 2 users"), "{stderr}");
}

#[test]
fn a_malformed_line_is_reported_with_its_number() {
    let bad = std::env::temp_dir().join(format!("kcl-host-bad-{}.jsonl", std::process::id()));
    std::fs::write(&bad, "{\"data\": \"ok\"}\n{\"data\": 5}\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kcl-host"))
        .args(["replay", guest("noop").to_str().unwrap(), "--input", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("input line 2: not a record object"), "{stderr}");
}

/// Large batches are where Go's collector used to run inside the host's
/// allocator calls and trap; the SDK defers collection to the end of each call.
#[test]
fn go_guests_take_batches_of_10000_records_of_1_kib() {
    let input = std::env::temp_dir().join(format!("kcl-host-big-{}.jsonl", std::process::id()));
    let line = |i: usize| {
        let event = format!(r#"{{"user":"u{}","kind":"purchase","amount":1,"pad":"{}"}}"#, i % 10, "x".repeat(960));
        serde_json::json!({ "data": event }).to_string()
    };
    std::fs::write(&input, (0..10_000).map(line).collect::<Vec<_>>().join("\n")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kcl-host"))
        .arg("replay")
        .arg(guest("go-json-aggregate"))
        .args(["--input", input.to_str().unwrap(), "--batch-size", "10000", "--cache-dir"]).arg(support::test_cache_dir())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("replayed 10000 records in 1 batches"), "{stdout}");
    assert!(stderr.contains("10000 purchases, 0 rejected, 10 users"), "{stderr}");
}

#[test]
fn replay_applies_the_failure_policy_and_shows_what_would_be_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("records.jsonl");
    let lines: Vec<String> = ["a", "b", "trap", "d", "e", "f"].iter().map(|d| serde_json::json!({ "data": d }).to_string()).collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let (out, dlq) = (dir.path().join("out.jsonl"), dir.path().join("dlq.jsonl"));
    let (target, on_failure) = (format!("out=file:{}", out.display()), format!("file:{}", dlq.display()));
    let args = ["--output", &target, "--max-retry-attempts", "2", "--bisect-on-error", "--retry-backoff", "10ms", "--on-failure", &on_failure];
    let (code, stdout, stderr) = replay_file("forward", input.to_str().unwrap(), &args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("gave up on 1 records (RetryAttemptsExhausted)"), "{stdout}");
    let data = |path: &std::path::Path| -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["data"].as_str().unwrap().to_owned()).collect()
    };
    let forwarded: Vec<String> = data(&out).iter().map(|line| line.rsplit(' ').next().unwrap().to_owned()).collect();
    assert_eq!(forwarded, ["a", "b", "d", "e", "f"], "every other record once, in order");
    let letters = data(&dlq);
    assert_eq!(letters.len(), 1);
    let envelope: serde_json::Value = serde_json::from_str(&letters[0]).unwrap();
    assert_eq!((envelope["data"].as_str(), envelope["attempts"].as_u64()), (Some("dHJhcA=="), Some(3)), "{envelope}");

    // Without a policy that gives up, replay stops at the first failure, as before.
    let (code, stdout, stderr) = replay_file("forward", input.to_str().unwrap(), &["--output", &target]);
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains("process-records (batch 1, records 1..=6) failed after 0 records: processor trapped"), "{stderr}");
}

/// Replay is for trying a processor without AWS: a target it sends to that
/// nobody declared is printed, as `kcl-host init`'s project sends to
/// `events` without the README's `--output`.
#[test]
fn replay_prints_what_is_sent_to_a_target_nobody_declared() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("records.jsonl");
    std::fs::write(&input, ["a", "b"].map(|d| serde_json::json!({ "data": d }).to_string()).join("\n")).unwrap();
    let (code, stdout, stderr) = replay_file("forward", input.to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let printed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("out {")).collect();
    assert_eq!(printed.len(), 2, "each record printed under the name it was sent to: {stdout}");
}

/// The Python SDK: `print` reaches the log, an unplanned exception is a
/// fatal error with its traceback, `kcl.FailedAt` names its record, and
/// `kcl.http` names a request header that cannot be sent.
#[test]
fn a_python_exception_is_fatal_with_its_traceback_and_print_reaches_the_log() {
    let input = std::env::temp_dir().join(format!("kcl-host-py-{}.jsonl", std::process::id()));
    let cases = [
        ("crash", "KeyError: 'no such key'"),
        ("fail", "asked to fail at 2"),
        ("bad-header", "header 'bad header' of the request to http://127.0.0.1:9/ cannot be sent: not a valid header name or value"),
    ];
    for (last, expected) in cases {
        std::fs::write(&input, format!("{{\"data\": \"a\", \"sequence_number\": \"1\"}}\n{{\"data\": \"{last}\", \"sequence_number\": \"2\"}}\n")).unwrap();
        let (code, stdout, stderr) = replay_file("py-faulty", input.to_str().unwrap(), &[]);
        assert_ne!(code, 0, "{stdout}\n{stderr}");
        assert!(stderr.contains("kcl_host::guest: saw 1 a"), "print reaches the log: {stderr}");
        assert!(format!("{stdout}{stderr}").contains(expected), "{stdout}\n{stderr}");
    }
    std::fs::write(&input, "{\"data\": \"crash\"}\n").unwrap();
    let (_, _, stderr) = replay_file("py-faulty", input.to_str().unwrap(), &[]);
    assert!(stderr.contains("Traceback (most recent call last)"), "the traceback is logged: {stderr}");
}

#[test]
fn a_javascript_exception_or_rejection_is_fatal_with_its_stack_and_console_reaches_the_log() {
    let input = tempfile::NamedTempFile::new().unwrap();
    let cases = [
        ("crash", "fatal error: TypeError: can't access property \"field\""),
        ("reject", "fatal error: RangeError: rejected at 2"),
        ("fail", "failed at record 1 of the batch: asked to fail at 2"),
    ];
    for (last, expected) in cases {
        std::fs::write(input.path(), format!("{{\"data\": \"a\", \"sequence_number\": \"1\"}}\n{{\"data\": \"{last}\", \"sequence_number\": \"2\"}}\n")).unwrap();
        let (code, stdout, stderr) = replay_file("js-faulty", input.path().to_str().unwrap(), &[]);
        assert_ne!(code, 0, "{stdout}\n{stderr}");
        assert!(stderr.contains("kcl_host::guest: saw 1 a"), "console.log reaches the log: {stderr}");
        assert!(format!("{stdout}{stderr}").contains(expected), "{last}: {stdout}\n{stderr}");
        if last != "fail" {
            assert!(stderr.contains("processRecords@app.js:"), "the stack is logged, down to the app's line: {stderr}");
        } else {
            assert!(stdout.contains("checkpoint 1"), "the record before the failed one is checkpointed: {stdout}");
        }
    }
}

/// `kcl.http` in a Python processor: a request to a destination nobody
/// allowed is refused by the host, which names the `--allow-outbound` that
/// would allow it, and reaches the processor as an `HttpError` with
/// wasi:http's code (the enrich example makes the batch retryable).
#[test]
fn a_python_request_nobody_allowed_is_refused_with_the_flag_that_allows_it() {
    refused_with_the_flag_that_allows_it("py-enrich");
}

/// The same for Go's net/http client over `kclhttp`: the request fails
/// with a `*kclhttp.Error` carrying wasi:http's code.
#[test]
fn a_go_request_nobody_allowed_is_refused_with_the_flag_that_allows_it() {
    refused_with_the_flag_that_allows_it("go-enrich");
}

fn refused_with_the_flag_that_allows_it(guest: &str) {
    let (code, stdout, stderr) = replay(guest, &["--var", "api_url=http://127.0.0.1:9"]);
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    assert!(stderr.contains("allow it with --allow-outbound http://127.0.0.1:9"), "{stderr}");
    let output = format!("{stdout}{stderr}");
    assert!(output.contains("looking up http://127.0.0.1:9/users/"), "the processor's error names the URL: {output}");
    assert!(output.contains("HTTP-request-denied"), "and wasi:http's code: {output}");
}

/// A local HTTP server on 127.0.0.1 that answers 200 to anything and
/// counts the connections it accepted.
fn counting_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut request = [0; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (port, accepted)
}

/// Replays `forward` on one `http:<url>` record per URL with `allow` as
/// the only `--allow-outbound`: (exit code, everything it printed).
fn fetch_each(urls: &[String], allow: &str) -> (i32, String) {
    let input = tempfile::NamedTempFile::new().unwrap();
    let lines: Vec<String> = urls.iter().map(|url| serde_json::json!({ "data": format!("http:{url}") }).to_string()).collect();
    std::fs::write(input.path(), lines.join("\n")).unwrap();
    let (code, stdout, stderr) = replay_file("forward", input.path().to_str().unwrap(), &["--allow-outbound", allow, "--output", "out=stdout"]);
    (code, format!("{stdout}{stderr}"))
}

/// A processor allowed everywhere (`*://*:*`) still reaches no loopback,
/// link-local or metadata address, however the URL spells it: the host
/// judges the address the name resolves to. Naming the address allows it.
#[test]
fn a_wildcard_allow_list_reaches_no_loopback_or_metadata_address_however_spelled() {
    let (port, accepted) = counting_server();
    // Names this machine's /etc/hosts points at loopback (`localhost` at least).
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut loopback: Vec<String> = hosts
        .lines()
        .filter(|l| l.trim_start().starts_with("127."))
        .flat_map(|l| l.split_whitespace().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    loopback.extend(["localhost", "127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.2", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]", "0.0.0.0", "0"].map(str::to_owned));
    let mut urls: Vec<String> = loopback.iter().map(|host| format!("http://{host}:{port}/metrics")).collect();
    // The instance metadata service (nothing listens there on this machine:
    // the host's verdict is what the test reads).
    let metadata = ["169.254.169.254", "[::ffff:a9fe:a9fe]", "0251.0376.0251.0376", "2852039166", "0xa9fea9fe", "169.254.170.2", "[fd00:ec2::254]"];
    urls.extend(metadata.iter().map(|host| format!("http://{host}/latest/meta-data/")));

    let (_, output) = fetch_each(&urls, "*://*:*");
    for url in &urls {
        let line = output.lines().find(|l| l.contains(&format!("http {url} "))).unwrap_or_else(|| panic!("no outcome for {url}:\n{output}"));
        assert!(line.contains(&format!("http {url} failed:")), "{url} was reached: {line}");
    }
    assert!(output.contains("a wildcard never allows"), "the host says why: {output}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "the local server was reached:\n{output}");

    // An entry naming the address allows it, in any spelling.
    let named = vec![format!("http://127.1:{port}/metrics")];
    let (_, output) = fetch_each(&named, &format!("http://127.0.0.1:{port}"));
    assert!(output.contains(&format!("http {} 200", named[0])), "{output}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A processor that prints 16 MiB in one call fills no disk: its instance
/// logs at most about a second's worth of lines, and the host says how
/// much it dropped.
#[test]
fn a_processor_flooding_its_output_is_rate_limited_and_told_what_was_dropped() {
    // 16 MiB of 100-byte lines: far over the limit (1,000 lines a second).
    const LINES: usize = (16 << 20) / 100;
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), "{\"data\": \"flood:16\"}\n{\"data\": \"after\"}\n").unwrap();
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = replay_file("forward", input.path().to_str().unwrap(), &["--output", "out=stdout"]);
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(code, 0, "{stdout}\n{}", &stderr[stderr.len().saturating_sub(2000)..]);
    let printed = stderr.lines().filter(|l| l.contains("kcl_host::guest: ffff")).count();
    assert!(printed >= 1_000, "a second's worth is kept: {printed} lines");
    // The rate holds however long the flood took on this machine.
    assert!((printed as f64) <= 1_000.0 * (elapsed + 1.0), "{printed} lines kept in {elapsed:.1} s");
    let dropped: usize = stderr
        .lines()
        .filter_map(|l| l.split("dropped ").nth(1)?.split(" lines (").next()?.parse::<usize>().ok())
        .sum();
    assert!(dropped > 0, "{}", &stderr[stderr.len().saturating_sub(2000)..]);
    // Every line is kept or counted as dropped: the flood's, and the next record's own line.
    let after_kept = stderr.lines().any(|l| l.contains("kcl_host::guest: record ") && l.contains(" after "));
    assert_eq!(printed + dropped, LINES + usize::from(!after_kept), "kept and dropped lines add up to what was printed");
    assert!(stderr.contains("of this processor's output: an instance logs at most"), "{}", &stderr[stderr.len().saturating_sub(2000)..]);
    assert!(stdout.contains("replayed 2 records"), "the next record is processed: {stdout}");
}

/// `replay --window 60s`: windows cut and closed by the records' arrival
/// times (the last at the end of the input, as at a shard's end), and the
/// Rust window-totals and its Go, Python and JavaScript ports (their SDKs'
/// `close_window`) send the same totals, byte for byte.
#[test]
fn replay_closes_windows_by_arrival_and_every_sdk_totals_them_alike() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("purchases.jsonl");
    let purchases = [("ana", 100, "12:00:05"), ("ben", 200, "12:00:30"), ("ana", 50, "12:00:59"), ("ben", 1, "12:01:10"), ("cy", 7, "12:02:00"), ("ana", 3, "12:02:30")];
    let lines: Vec<String> = purchases
        .iter()
        .map(|(user, cents, at)| serde_json::json!({ "data": format!("{{\"cents\": {cents}}}"), "partition_key": user, "arrival": format!("2026-12-01T{at}Z") }).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let minute = |m: u64| 1_796_126_400_000 + m * 60_000; // 2026-12-01T12:0m:00Z
    let mut sent_by = Vec::new();
    for guest_name in ["window-totals", "go-window-totals", "py-window-totals", "js-window-totals"] {
        let (code, stdout, stderr) = replay_file(guest_name, input.to_str().unwrap(), &["--window", "60s", "--output", "totals=stdout"]);
        assert_eq!(code, 0, "{guest_name}: {stdout}\n{stderr}");
        let closes: Vec<&str> = stdout.lines().filter(|l| l.starts_with("window [")).collect();
        assert_eq!(closes, [
            format!("window [{}, {}) closes with 2 keys", minute(0), minute(1)),
            format!("window [{}, {}) closes with 1 keys", minute(1), minute(2)),
            format!("window [{}, {}) closes with 2 keys", minute(2), minute(3)),
        ], "{guest_name}: {stdout}");
        let sent: Vec<serde_json::Value> = stdout.lines().filter_map(|l| l.strip_prefix("totals ")).map(|l| serde_json::from_str(l).unwrap()).collect();
        sent_by.push((guest_name, sent));
    }
    let (_, rust) = &sent_by[0];
    let totals: Vec<(String, i64, u64, bool)> = rust
        .iter()
        .map(|record| {
            let item: serde_json::Value = serde_json::from_str(record["data"].as_str().unwrap()).unwrap();
            (item["user"].as_str().unwrap().to_owned(), item["cents"].as_i64().unwrap(), item["window_start_ms"].as_u64().unwrap(), item["shard_ended"].as_bool().unwrap())
        })
        .collect();
    let expected = [("ana", 150, 0, false), ("ben", 200, 0, false), ("ben", 1, 1, false), ("ana", 3, 2, true), ("cy", 7, 2, true)];
    let mut sorted = totals.clone();
    sorted.sort_by_key(|(user, _, start, _)| (*start, user.clone()));
    assert_eq!(sorted, expected.map(|(user, cents, m, ended)| (user.to_owned(), cents, minute(m), ended)), "the Rust totals per window");
    for (guest_name, sent) in &sent_by[1..] {
        let set = |records: &[serde_json::Value]| records.iter().map(ToString::to_string).collect::<std::collections::BTreeSet<_>>();
        assert_eq!(set(sent), set(rust), "{guest_name} sends what the Rust example sends");
    }
}

/// A processor that implements no `close_window` is told so by name, in
/// every SDK that exports windows, when a window closes.
#[test]
fn a_window_closing_on_a_processor_without_close_window_fails_naming_the_method() {
    let methods = [
        ("counter", "RecordProcessor::close_window"),
        ("go-counter", "kcl.WindowCloser (CloseWindow)"),
        ("py-counter", "RecordProcessor.close_window"),
        ("js-counter", "RecordProcessor.closeWindow"),
    ];
    for (guest_name, method) in methods {
        let (code, stdout, stderr) = replay(guest_name, &["--window", "60s"]);
        assert_ne!(code, 0, "{guest_name}: {stdout}");
        assert!(stderr.contains(&format!("does not implement {method}")) && stderr.contains("close-window ["), "{guest_name}: {stderr}");
    }
}

/// A table's changes, as `aws dynamodbstreams get-records` gives them, summed
/// into state alike by the `table-totals` example of every SDK: each
/// partition key's total and each item's last amount, from the images.
#[test]
fn every_sdk_sums_a_tables_changes_from_their_images_alike() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("changes.json");
    let item = |pk: &str, sk: u32, amount: Option<i64>| {
        amount.map(|amount| serde_json::json!({ "pk": { "S": pk }, "sk": { "N": sk.to_string() }, "amount": { "N": amount.to_string() } }))
    };
    // (event, pk, sk, old amount, new amount)
    let changes = [
        ("INSERT", "acct-1", 1, None, Some(500)),
        ("INSERT", "acct-1", 2, None, Some(20)),
        ("INSERT", "acct-é", 1, None, Some(7)),
        ("MODIFY", "acct-1", 1, Some(500), Some(450)),
        ("REMOVE", "acct-1", 2, Some(20), None),
        ("INSERT", "acct-2", 1, None, Some(9_007_199_254_740_993)), // past 2^53: a JavaScript Number is no longer exact
        ("MODIFY", "acct-2", 1, Some(9_007_199_254_740_993), Some(9_007_199_254_740_995)),
    ];
    let records: Vec<serde_json::Value> = changes
        .iter()
        .enumerate()
        .map(|(i, (event, pk, sk, old, new))| {
            let mut dynamodb = serde_json::json!({
                "ApproximateCreationDateTime": format!("2026-12-01T12:00:{:02}+00:00", i),
                "Keys": { "pk": { "S": pk }, "sk": { "N": sk.to_string() } },
                "SequenceNumber": format!("{}", 1_100_000_000_017_454_423_000_u128 + i as u128),
                "SizeBytes": 40, "StreamViewType": "NEW_AND_OLD_IMAGES",
            });
            if let Some(image) = item(pk, *sk, *new) {
                dynamodb["NewImage"] = image;
            }
            if let Some(image) = item(pk, *sk, *old) {
                dynamodb["OldImage"] = image;
            }
            serde_json::json!({ "eventID": i.to_string(), "eventName": event, "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "dynamodb": dynamodb })
        })
        .collect();
    std::fs::write(&input, serde_json::json!({ "Records": records, "NextShardIterator": "arn:..." }).to_string()).unwrap();
    let expected = serde_json::json!({
        "total/acct-1": "450", "item/acct-1/1": "450", "total/acct-é": "7", "item/acct-é/1": "7",
        "total/acct-2": "9007199254740995", "item/acct-2/1": "9007199254740995",
    });
    for guest_name in ["table-totals", "go-table-totals", "py-table-totals", "js-table-totals"] {
        let state = dir.path().join(format!("{guest_name}.json"));
        let (code, stdout, stderr) = replay_file(guest_name, input.to_str().unwrap(), &["--batch-size", "3", "--state", state.to_str().unwrap()]);
        assert_eq!(code, 0, "{guest_name}: {stdout}\n{stderr}");
        let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
        assert_eq!(saved, expected, "{guest_name}: {stdout}\n{stderr}");
        assert!(!stderr.contains("the change says"), "{guest_name} saw every change in order: {stderr}");
    }
}
