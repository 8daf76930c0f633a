//! `--metrics cloudwatch` and `--metrics emf`: a worker's metrics in the
//! Java KCL's names and dimensions, read back from CloudWatch (moto) the way
//! a dashboard reads them, and its EMF lines checked against the format's
//! specification; a CloudWatch that never answers holds up no checkpoint.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kcl_testkit::java_kcl3;
use kcl_testkit::process::parse_delivered;
use serde_json::Value;

use super::outputs::checkpoints;
use super::*;

fn kit_file(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/kit").join(name).display().to_string()
}

/// `tests/kit/cloudwatch_check.py` with moto's Python (boto3, jsonschema).
fn cloudwatch_check(args: &[&str]) -> String {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tools/moto/venv/bin/python");
    let output = Command::new(&python).arg(kit_file("cloudwatch_check.py")).args(args).output().expect("moto's Python runs (scripts/servers.sh start --kcl3)");
    assert!(output.status.success(), "cloudwatch_check {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The metric `name` with exactly `dimensions`, as CloudWatch gives it back.
fn metric<'a>(metrics: &'a [Value], name: &str, dimensions: &[(&str, &str)]) -> &'a Value {
    let wanted: serde_json::Map<String, Value> = dimensions.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
    metrics
        .iter()
        .find(|m| m["name"] == name && m["dimensions"].as_object() == Some(&wanted))
        .unwrap_or_else(|| panic!("no {name} with {dimensions:?} in CloudWatch: {metrics:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudwatch_and_emf_count_every_record_under_kcls_names_and_dimensions() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("metrics"), 2).await;
    let application = unique("metrics-app");
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let sent = [(shards[0].clone(), payloads("first", 30)), (shards[1].clone(), payloads("second-shard", 20))];
    for (shard, records) in &sent {
        stream.put(shard, records).await;
    }
    let emf = std::env::temp_dir().join(format!("{application}.emf"));
    let emf = emf.display().to_string();
    let cloudwatch = java_kcl3::dynamodb_endpoint();
    let flags = ["--metrics", "cloudwatch", "--metrics", "emf", "--metrics-emf-file", &emf, "--metrics-buffer-time", "1s"];
    let mut worker = start_with_env("counter", &stream.name, &application, "w1", &flags, &[("AWS_ENDPOINT_URL_CLOUDWATCH", &cloudwatch)]);
    worker.wait_for("every record", LIMIT, |log| log.iter().filter_map(|l| parse_delivered(l)).count() >= 50).await;
    assert_eq!(worker.delivered().await.len(), 50);
    // The last interval is published as the worker stops.
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(!log.iter().any(|l| l.contains("publishing metrics to CloudWatch failed")), "{}", log.join("\n"));

    let metrics: Vec<Value> = cloudwatch_check(&["read", &cloudwatch, &application]).lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    for (shard, records) in &sent {
        let per_shard = [("Operation", "ProcessTask"), ("ShardId", shard.as_str())];
        let processed = metric(&metrics, "RecordsProcessed", &per_shard);
        assert_eq!((processed["unit"].as_str(), processed["sum"].as_f64()), (Some("Count"), Some(records.len() as f64)), "{processed}");
        let bytes = metric(&metrics, "DataBytesProcessed", &per_shard);
        let expected: usize = records.iter().map(String::len).sum();
        assert_eq!((bytes["unit"].as_str(), bytes["sum"].as_f64()), (Some("Bytes"), Some(expected as f64)), "{bytes}");
        assert_eq!(metric(&metrics, "MillisBehindLatest", &per_shard)["unit"], "Milliseconds");
        let time = metric(&metrics, "RecordProcessor.processRecords.Time", &per_shard);
        assert!(time["unit"] == "Milliseconds" && time["count"].as_f64() >= Some(1.0), "{time}");
    }
    let worker_dimensions = |operation| [("Operation", operation), ("WorkerIdentifier", "w1")];
    assert_eq!(metric(&metrics, "CurrentLeases", &worker_dimensions("RenewAllLeases"))["max"], 2.0);
    assert_eq!(metric(&metrics, "TakenLeases", &worker_dimensions("TakeLeases"))["sum"], 2.0);
    assert_eq!(metric(&metrics, "MillisBehindLatest", &[("Operation", "ApplicationTracker")])["unit"], "Milliseconds");
    assert!(metric(&metrics, "CheckpointsWritten", &worker_dimensions("Checkpoint"))["sum"].as_f64() >= Some(2.0));

    // The same counts in the EMF lines, each valid by the specification.
    let checked: usize = cloudwatch_check(&["emf", &kit_file("emf-schema.json"), &emf]).trim().parse().expect("a count");
    let lines: Vec<Value> = std::fs::read_to_string(&emf).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(checked, lines.len());
    for (shard, records) in &sent {
        let emitted: f64 = lines.iter().filter(|l| l["ShardId"] == shard.as_str()).filter_map(|l| l["RecordsProcessed"].as_f64()).sum();
        assert_eq!(emitted, records.len() as f64, "{shard} in {emf}");
        assert!(lines.iter().any(|l| l["ShardId"] == shard.as_str() && l["_aws"]["CloudWatchMetrics"][0]["Namespace"] == application.as_str()));
    }
}

/// A CloudWatch endpoint that accepts connections and never answers.
struct BlackHole {
    endpoint: String,
    accepted: Arc<AtomicUsize>,
    arrived: Arc<tokio::sync::Notify>,
}

impl BlackHole {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let (accepted, arrived) = (Arc::new(AtomicUsize::new(0)), Arc::new(tokio::sync::Notify::new()));
        let (count, notify) = (accepted.clone(), arrived.clone());
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
                count.fetch_add(1, Ordering::SeqCst);
                notify.notify_one();
            }
        });
        BlackHole { endpoint, accepted, arrived }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloudwatch_that_never_answers_holds_up_no_checkpoint() {
    let began = tokio::time::Instant::now();
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("metrics-hole"), 1).await;
    let application = unique("metrics-hole-app");
    let hole = BlackHole::start().await;
    let flags = ["--metrics", "cloudwatch", "--metrics-buffer-time", "1s"];
    let mut worker = start_with_env("counter", &stream.name, &application, "w1", &flags, &[("AWS_ENDPOINT_URL_CLOUDWATCH", &hole.endpoint)]);
    worker.wait_for("the first lease pass", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;
    tokio::time::timeout(LIMIT, hole.arrived.notified()).await.expect("the worker calls CloudWatch");

    // The counter checkpoints every 100 records: the 300th is checkpointed
    // while PutMetricData hangs.
    let shard = stream.shards().await.remove(0).id;
    let last = stream.put(&shard, &payloads("r", 300)).await.pop().unwrap();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while checkpoints(&aws, &application).await.get(&shard) != Some(&last) {
        assert!(tokio::time::Instant::now() < deadline, "the last record was not checkpointed: {:#?}", worker.log().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(hole.accepted.load(Ordering::SeqCst) >= 1);
    // The last publish is given up on, not waited out (interrupt() allows 40 s).
    let (status, log) = worker.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let warnings = log.iter().filter(|l| l.contains("publishing metrics to CloudWatch failed")).count() as u64;
    let allowed = 1 + began.elapsed().as_secs() / 60;
    assert!(warnings <= allowed, "one warning a minute at most, not one a call: {warnings}\n{}", log.join("\n"));
}
