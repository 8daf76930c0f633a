//! The failure policy, end to end: the `forward` guest sends every record
//! on to `out` and checkpoints each batch, and fails on poison records
//! (`trap` traps, `fail` returns a fatal error, `fail-here` a partial
//! failure). Judged from the output and dead-letter streams, the lease
//! table, `status`, `/metrics` and the logs.

use base64::Engine as _;
use kcl_testkit::{at_or_before, StreamRecord};
use serde_json::Value;

use kcl_testkit::process::KclHost;

use super::outputs::{checkpoints, data, forwarded, until};
use super::*;

/// 0-based index of the poison record in each poisoned shard.
const TRAP_AT: usize = 734;
const FAIL_AT: usize = 277;

/// The dead letters in `dlq`, each envelope parsed.
async fn dead_letters(dlq: &TestStream) -> Vec<Value> {
    dlq.read_all().await.iter().map(|r| serde_json::from_str(&r.data).expect("an envelope is JSON")).collect()
}

/// An envelope's record data, decoded.
fn letter_data(envelope: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD.decode(envelope["data"].as_str().expect("data")).expect("base64");
    String::from_utf8(bytes).expect("text")
}

/// `count` records per shard of `input`, `<prefix>-<shard index>-<i>`,
/// with `poison` data at the given (shard index, record index); returns
/// each shard's records in order.
async fn fill(input: &TestStream, prefix: &str, count: usize, poison: &[(usize, usize, &str)]) -> Vec<Vec<StreamRecord>> {
    let shards: Vec<String> = input.shards().await.into_iter().map(|s| s.id).collect();
    let mut records: Vec<(String, String)> = Vec::new();
    for (s, shard) in shards.iter().enumerate() {
        for i in 0..count {
            let data = poison.iter().find(|p| p.0 == s && p.1 == i).map_or_else(|| format!("{prefix}-{s}-{i}"), |p| p.2.to_owned());
            records.push((shard.clone(), data));
        }
    }
    let entries: Vec<(&str, &[u8], &str)> = records.iter().map(|(shard, data)| (shard.as_str(), data.as_bytes(), shard.as_str())).collect();
    let sequence_numbers = input.put_to(&entries).await;
    shards
        .iter()
        .map(|shard| {
            records
                .iter()
                .zip(&sequence_numbers)
                .filter(|((s, _), _)| s == shard)
                .map(|((s, d), seq)| StreamRecord { shard: s.clone(), sequence_number: seq.clone(), partition_key: s.clone(), data: d.clone() })
                .collect()
        })
        .collect()
}

/// Waits until every shard is checkpointed at its record in `lasts`, calling
/// `each` with the checkpoints read each time; a stall panics with the
/// checkpoints and `host`'s last lines.
async fn until_checkpointed(aws: &AwsClients, application: &str, lasts: &BTreeMap<String, String>, host: &KclHost, mut each: impl AsyncFnMut(&BTreeMap<String, String>)) {
    let deadline = tokio::time::Instant::now() + 2 * LIMIT;
    loop {
        let cps = checkpoints(aws, application).await;
        each(&cps).await;
        if cps == *lasts {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let log = host.log().await;
            let tail: Vec<&String> = log.iter().filter(|l| !l.contains("kcl_host::guest")).rev().take(40).collect();
            panic!("the shards did not reach their last records in {:?}: checkpoints {cps:#?}, wanted {lasts:#?}; the worker's last lines: {tail:#?}", 2 * LIMIT);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What a failure test reads and writes: an input stream of `shards`
/// shards, one-shard `out` and `dlq` streams, and an application name, all
/// named after `prefix`.
struct Streams {
    input: TestStream,
    out: TestStream,
    dlq: TestStream,
    application: String,
}

impl Streams {
    async fn create(aws: &AwsClients, prefix: &str, shards: i32) -> Self {
        let stream = |what: &str| unique(&format!("{prefix}-{what}"));
        Streams {
            input: TestStream::create(&aws.kinesis, &stream("in"), shards).await,
            out: TestStream::create(&aws.kinesis, &stream("out"), 1).await,
            dlq: TestStream::create(&aws.kinesis, &stream("dlq"), 1).await,
            application: stream("app"),
        }
    }

    /// `--output out=kinesis:OUT`
    fn output(&self) -> String {
        format!("out=kinesis:{}", self.out.name)
    }

    /// `--on-failure kinesis:DLQ`
    fn on_failure(&self) -> String {
        format!("kinesis:{}", self.dlq.name)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_reach_the_dead_letter_stream_alone_with_their_data_and_the_shards_go_on() {
    let aws = clients().await;
    let streams = Streams::create(&aws, "poison", 4).await;
    let Streams { input, out, dlq, application } = &streams;
    let shards = fill(input, "p", 1000, &[(1, TRAP_AT, "trap"), (2, FAIL_AT, "fail")]).await;
    let (trap, fail) = (&shards[1][TRAP_AT], &shards[2][FAIL_AT]);
    let (target, on_failure, admin) = (streams.output(), streams.on_failure(), admin_address());
    let flags = [
        "--output", &target, "--on-failure", &on_failure, "--bisect-on-error", "--max-retry-attempts", "2", "--retry-backoff", "100ms",
        "--max-records", "500", "--admin-listen", &admin,
    ];
    let mut worker = start_with("forward", &input.name, application, "w1", &flags);
    worker.wait_for("the first lease pass", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;

    // Until every shard is checkpointed at its last record: each time, the
    // checkpoints first, then the dead letters — a checkpoint past a poison
    // record must find its dead letter already written.
    let lasts: BTreeMap<String, String> = shards.iter().map(|s| (s[0].shard.clone(), s.last().unwrap().sequence_number.clone())).collect();
    let mut checks = 0;
    until_checkpointed(&aws, application, &lasts, &worker, async |cps| {
        let letters: Vec<String> = dead_letters(dlq).await.iter().map(|l| l["sequence_number"].as_str().unwrap().to_owned()).collect();
        for poison in [trap, fail] {
            if cps.get(&poison.shard).is_some_and(|cp| at_or_before(&poison.sequence_number, cp)) {
                assert!(letters.contains(&poison.sequence_number), "{} checkpointed past {} before its dead letter was written", poison.shard, poison.data);
                checks += 1;
            }
        }
    })
    .await;
    assert!(checks >= 2, "the checkpoints past both poison records were each checked against the dead letters");

    let letters = dead_letters(dlq).await;
    assert_eq!(letters.len(), 2, "exactly the two poison records: {letters:#?}");
    for (poison, error) in [(trap, "processor trapped"), (fail, "asked to fail")] {
        let letter = letters.iter().find(|l| l["sequence_number"] == poison.sequence_number.as_str()).expect("its dead letter");
        assert_eq!(letter_data(letter), poison.data, "the record's own data");
        assert_eq!(letter["shard"], poison.shard.as_str());
        assert_eq!(letter["stream"], input.name.as_str());
        assert_eq!(letter["partition_key"], poison.partition_key.as_str());
        assert_eq!(letter["condition"], "RetryAttemptsExhausted");
        assert_eq!(letter["attempts"], 3, "one call and two retries, the record alone");
        assert!(letter["error"].as_str().unwrap().contains(error), "{letter}");
        assert!(letter["processor"].as_str().unwrap().contains("kcl-test-guest-forward"), "{letter}");
        assert!(letter["arrival"].as_str().unwrap().ends_with('Z'), "{letter}");
    }

    // Every other record once, except around a poison record: the batch it
    // came in was split and delivered again in parts.
    let outs = forwarded(&data(&out.read_all().await));
    let mut twice = 0;
    for (s, records) in shards.iter().enumerate() {
        for (i, r) in records.iter().enumerate() {
            let n = outs.get(&(r.shard.clone(), r.sequence_number.clone())).copied().unwrap_or(0);
            if r.data == "trap" || r.data == "fail" {
                assert_eq!(n, 0, "a poison record is never forwarded");
                continue;
            }
            assert!(n >= 1, "{} {} {} never forwarded", r.shard, r.sequence_number, r.data);
            let near_poison = (s == 1 && i.abs_diff(TRAP_AT) < 500) || (s == 2 && i.abs_diff(FAIL_AT) < 500);
            assert!(n == 1 || near_poison, "{} forwarded {n} times, far from any poison record", r.data);
            twice += usize::from(n > 1);
        }
    }

    let (_, metrics) = http_get(&admin, "/metrics").await;
    for poison in [trap, fail] {
        let shard = format!("shard=\"{}\"", poison.shard);
        let action = |a: &str| series_labelled(&metrics, "kcl_host_failure_policy_total", &[shard.clone(), format!("action=\"{a}\"")]);
        assert_eq!(action("dead-letter"), Some(1.0), "{metrics}");
        assert!(action("bisect").is_some_and(|n| n >= 8.0), "a batch of 500 takes 8 or 9 splits: {metrics}");
    }
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(log.iter().any(|l| l.contains("records given up on: 2 written to --on-failure, 0 skipped")), "the exit line counts them");
    let requests = log.iter().find(|l| l.contains("Kinesis.GetShardIterator=")).expect("the exit line counts requests");
    let reads = requests.split_whitespace().find_map(|w| w.strip_prefix("Kinesis.GetShardIterator=")).unwrap();
    assert_eq!(reads, "4", "each shard read once: a trap's fresh instance gets the records since the checkpoint from memory");
    eprintln!("{} records forwarded, {twice} more than once (all in a split batch), 2 dead letters; {requests}", outs.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_it_isolates_a_poison_record_loses_nothing_and_skips_nothing() {
    let aws = clients().await;
    let streams = Streams::create(&aws, "kill", 2).await;
    let Streams { input, out, dlq, application } = &streams;
    let shards = fill(input, "k", 600, &[(0, 300, "trap")]).await;
    let (target, on_failure) = (streams.output(), streams.on_failure());
    // A slow isolation (1 s before the record alone is tried again) to kill the worker in the middle of.
    let flags = [
        "--output", &target, "--on-failure", &on_failure, "--bisect-on-error", "--max-retry-attempts", "1", "--retry-backoff", "1s",
        "--max-records", "500", "--failover-time", "4s",
    ];
    let mut first = start_with("forward", &input.name, application, "w1", &flags);
    first.wait_for("a split of the poisoned batch", LIMIT, |log| count_lines(log, "splitting the batch to find the failing record") >= 3).await;
    first.kill().await;
    assert!(dead_letters(dlq).await.is_empty(), "killed before the record was isolated");

    let second = start_with("forward", &input.name, application, "w2", &flags);
    let lasts: BTreeMap<String, String> = shards.iter().map(|s| (s[0].shard.clone(), s.last().unwrap().sequence_number.clone())).collect();
    until_checkpointed(&aws, application, &lasts, &second, async |_| {}).await;
    let letters = dead_letters(dlq).await;
    assert!(!letters.is_empty() && letters.iter().all(|l| letter_data(l) == "trap"), "the poison record reached the dead letters: {letters:#?}");
    let outs = forwarded(&data(&out.read_all().await));
    for r in shards.iter().flatten().filter(|r| r.data != "trap") {
        assert!(outs.contains_key(&(r.shard.clone(), r.sequence_number.clone())), "{} {} lost", r.shard, r.data);
    }
    let (status, log) = second.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_older_than_the_age_limit_go_to_the_dead_letters_without_reaching_the_processor() {
    let aws = clients().await;
    let streams = Streams::create(&aws, "age", 1).await;
    let Streams { input, out, dlq, application } = &streams;
    let shard = input.shards().await[0].id.clone();
    let old = input.put(&shard, &payloads("old", 5)).await;
    // The records age on the clock: nothing to await but the time itself.
    // A 5 s limit leaves the fresh records room on a loaded machine.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (target, on_failure) = (streams.output(), streams.on_failure());
    let mut worker = start_with("forward", &input.name, application, "w1", &["--output", &target, "--on-failure", &on_failure, "--max-record-age", "5s"]);
    worker.wait_for("the old records given up on", LIMIT, |log| log.iter().any(|l| l.contains("gave up on 5 records (RecordAgeExceeded)"))).await;
    let fresh = payloads("new", 5);
    input.put(&shard, &fresh).await;
    worker.wait_for("the new records processed", LIMIT, |log| processed(log, &fresh)).await;

    let letters = dead_letters(dlq).await;
    let given_up: Vec<&str> = letters.iter().map(|l| l["sequence_number"].as_str().unwrap()).collect();
    assert_eq!(given_up, old.iter().map(String::as_str).collect::<Vec<_>>(), "the old records, in order");
    assert!(letters.iter().all(|l| l["condition"] == "RecordAgeExceeded" && l["attempts"] == 0), "{letters:#?}");
    assert_eq!(letters.iter().map(letter_data).collect::<Vec<_>>(), payloads("old", 5));
    let forwarded = data(&out.read_all().await);
    assert!(forwarded.iter().all(|line| !line.contains(" old-")), "an old record reached the processor: {forwarded:?}");
    assert_eq!(forwarded.len(), 5);
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(!log.iter().any(|l| l.contains("kcl_host::guest") && l.contains(" old-")), "the processor never saw an old record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_failure_checkpoints_the_records_before_it_and_unlimited_retries_show_in_status_and_metrics() {
    let aws = clients().await;
    let streams = Streams::create(&aws, "partial", 1).await;
    let Streams { input, out, application, .. } = &streams;
    let shard = input.shards().await[0].id.clone();
    let mut records = payloads("r", 10);
    records[6] = "fail-here".into();
    let sequence_numbers = input.put(&shard, &records).await;
    let (target, admin) = (streams.output(), admin_address());
    // No --max-retry-attempts: the default retries without limit, and the shard waits at the record.
    let flags = ["--output", &target, "--retry-backoff", "200ms", "--admin-listen", &admin, "--failover-time", "3s"];
    let mut worker = start_with("forward", &input.name, application, "w1", &flags);
    worker.wait_for("the first lease pass", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;

    let before = BTreeMap::from([(shard.clone(), sequence_numbers[5].clone())]);
    until("the records before the failed one checkpointed", || async { checkpoints(&aws, application).await == before }).await;
    until("three failed calls on the record", || async {
        let (_, metrics) = http_get(&admin, "/metrics").await;
        series(&metrics, "kcl_host_retry_attempts", Some(&shard)).is_some_and(|n| n >= 3.0)
    })
    .await;
    // The heartbeat reports the failures up to a beat after the metrics count them.
    let json = std::cell::RefCell::new(Value::Null);
    until("status to show the three failures", || async {
        json.replace(serde_json::from_str(&run_to_exit(&["status", "--application", application, "--json"], &[]).await.1).unwrap());
        json.borrow()["shards"][0]["retrying"]["attempts"].as_u64().is_some_and(|n| n >= 3)
    })
    .await;
    let json = json.into_inner();
    let text = run_to_exit(&["status", "--application", application], &[]).await.1;
    let line = text.lines().find(|l| l.starts_with(&format!("{shard} retrying "))).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(" failures (no limit: blocked): processor failed at record 0"), "{line}");
    let retrying = &json["shards"][0]["retrying"];
    assert_eq!(json["shards"][0]["state"], "retrying");
    assert!(retrying["attempts"].as_u64().is_some_and(|n| n >= 3) && retrying["limit"].is_null(), "{json}");
    assert_eq!(retrying["last_error"], format!("processor failed at record 0 of the batch: asked to fail at {}", sequence_numbers[6]).as_str());

    let outs = forwarded(&data(&out.read_all().await));
    let want: BTreeMap<(String, String), usize> = sequence_numbers[..6].iter().map(|seq| ((shard.clone(), seq.clone()), 1)).collect();
    assert_eq!(outs, want, "the six records before it, once each; nothing after it is skipped ahead");
    assert_eq!(checkpoints(&aws, application).await, before, "the checkpoint waits at the failing record");
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(log.iter().any(|l| l.contains("checkpointing the 6 records before it, then delivering again from it")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_error_message_leaves_heartbeats_leases_and_dead_letters_working() {
    let aws = clients().await;
    let streams = Streams::create(&aws, "long-error", 2).await;
    let Streams { input, dlq, application, .. } = &streams;
    let shards = fill(input, "l", 200, &[(1, 50, "fail-long")]).await;
    let poison = &shards[1][50];
    let (target, on_failure, admin) = (streams.output(), streams.on_failure(), admin_address());
    let flags = ["--output", &target, "--on-failure", &on_failure, "--bisect-on-error", "--max-retry-attempts", "2", "--retry-backoff", "100ms", "--admin-listen", &admin, "--failover-time", "3s"];
    let mut worker = start_with("forward", &input.name, application, "w1", &flags);
    worker.wait_for("the first lease pass", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;

    let lasts: BTreeMap<String, String> = shards.iter().map(|s| (s[0].shard.clone(), s.last().unwrap().sequence_number.clone())).collect();
    until_checkpointed(&aws, application, &lasts, &worker, async |_| {}).await;
    let letters = dead_letters(dlq).await;
    assert_eq!(letters.len(), 1, "the record with the long error, once: {letters:#?}");
    assert_eq!(letters[0]["sequence_number"], poison.sequence_number.as_str());
    let error = letters[0]["error"].as_str().unwrap();
    assert!(error.contains("asked to fail") && error.len() < 8 * 1024, "the error is cut where it enters: {} bytes", error.len());
    let (status, _) = http_get(&admin, "/healthz").await;
    assert!(status.contains("200"), "the worker stays healthy: {status}");

    let (exit, log) = worker.interrupt().await;
    assert!(exit.success(), "{}", log.join("\n"));
    let bytes: usize = log.iter().map(String::len).sum();
    assert!(bytes < 1 << 20, "{bytes} bytes of log for three failures of a 1 MiB message");
    for refused in ["ValidationException", "lease lost", "could not write the heartbeat"] {
        assert!(!log.iter().any(|l| l.contains(refused)), "{refused} in the log: the heartbeat row grew past its limit");
    }
}
