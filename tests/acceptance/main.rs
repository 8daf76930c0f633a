//! The seed's scenario and its relatives, end to end: `kcl-host run` as a
//! process against the local Kinesis and DynamoDB servers.
//!
//! Needs `scripts/servers.sh start` and `scripts/build-guests.sh` first
//! (`scripts/test.sh` does both).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kcl_host::aws::AwsClients;
use kcl_host::lease::{Checkpoint, Lease};
use kcl_testkit::process::{Delivered, KclHost};
use kcl_testkit::{clients, leases, test_cache_dir, unique, write_leases, TestStream};

mod faults;
mod rollout;

/// A guest's path, as an argument.
fn guest(name: &str) -> String {
    kcl_testkit::guest(name).display().to_string()
}

/// Generous: the servers are slow on a loaded 2-core machine. Nothing waits
/// this long unless something is broken.
const LIMIT: Duration = Duration::from_secs(90);

fn payloads(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn start(guest_name: &str, stream: &str, application: &str, worker: &str) -> KclHost {
    start_with(guest_name, stream, application, worker, &[])
}

/// `kcl-host run` with the tests' settings plus `extra` flags.
fn start_with(guest_name: &str, stream: &str, application: &str, worker: &str, extra: &[&str]) -> KclHost {
    let (processor, cache) = (guest(guest_name), test_cache_dir().display().to_string());
    let mut args = vec![
        "run", &processor, "--stream", stream, "--application", application, "--worker-id", worker,
        "--idle-time-between-reads", "200ms", "--cache-dir", &cache,
    ];
    args.extend_from_slice(extra);
    KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args)
}

fn lease<'a>(leases: &'a [Lease], key: &str) -> &'a Lease {
    leases.iter().find(|l| l.key == key).unwrap_or_else(|| panic!("no lease for {key} in {leases:#?}"))
}

/// Records per shard, checking each shard's records came in sequence order.
fn by_shard(delivered: &[Delivered]) -> BTreeMap<String, Vec<String>> {
    let mut shards: BTreeMap<String, Vec<&Delivered>> = BTreeMap::new();
    for d in delivered {
        shards.entry(d.shard.clone()).or_default().push(d);
    }
    shards
        .into_iter()
        .map(|(shard, records)| {
            for pair in records.windows(2) {
                let (a, b) = (&pair[0].sequence_number, &pair[1].sequence_number);
                assert!((a.len(), a) < (b.len(), b), "{shard}: {a} delivered before {b}, out of order");
            }
            (shard, records.into_iter().map(|r| r.data.clone()).collect())
        })
        .collect()
}

/// Puts one record `<prefix>-<shard>` on each of `shards`; returns their data.
async fn one_each(stream: &TestStream, shards: &[String], prefix: &str) -> Vec<String> {
    let mut all = Vec::new();
    for shard in shards {
        let data = format!("{prefix}-{shard}");
        stream.put(shard, std::slice::from_ref(&data)).await;
        all.push(data);
    }
    all
}

/// Whether every record whose data is in `data` was processed.
fn processed(log: &[String], data: &[String]) -> bool {
    let done: BTreeSet<String> = delivered(log).into_iter().map(|d| d.data).collect();
    data.iter().all(|d| done.contains(d))
}

/// How often a worker's `log` says it judged another worker dead.
fn judged_dead(log: &[String]) -> usize {
    log.iter().filter(|l| l.contains("the fleet changed") && l.contains("dead={\"worker-")).count()
}

fn count_lines(log: &[String], needle: &str) -> usize {
    log.iter().filter(|l| l.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end() {
    seed_scenario("counter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end_by_the_go_counter() {
    seed_scenario("go-counter").await;
}

/// The seed's scenario with a counter processor (Rust or Go, same logic).
async fn seed_scenario(counter: &str) {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("seed"), 1).await;
    let parent = stream.shards().await[0].id.clone();
    let parent_records = payloads("parent", 50);
    stream.put(&parent, &parent_records).await;
    let children = stream.split(&parent).await;
    assert_eq!(children.len(), 2, "a split makes two children");
    let mut child_records = BTreeMap::new();
    for (i, child) in children.iter().enumerate() {
        let records = payloads(&format!("child{i}"), 30);
        stream.put(child, &records).await;
        child_records.insert(child.clone(), records);
    }

    // The counter guest checkpoints every 100 records and never in shutdown:
    // on the parent (50 records) it never checkpoints at all.
    let application = unique("seed-app");
    let mut host = start(counter, &stream.name, &application, "worker-1");
    host.wait_for("all 110 records", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= 110).await;
    let delivered = host.delivered().await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "graceful stop exits 0: {status:?}\n{}", log.join("\n"));

    // Every record of all three shards, each exactly once, in shard order.
    let shards = by_shard(&delivered);
    assert_eq!(shards[&parent], parent_records);
    for (child, records) in &child_records {
        assert_eq!(&shards[child], records);
    }
    assert_eq!(delivered.len(), 110, "nothing delivered twice");
    // Each parent record before any child record.
    let last_parent = delivered.iter().rposition(|d| d.shard == parent).unwrap();
    let first_child = delivered.iter().position(|d| d.shard != parent).unwrap();
    assert!(last_parent < first_child, "a child record came before the parent's last");

    // SHARD_END written by the host, with the children; the parent never taken again.
    let table = leases(&aws.dynamodb, &application).await;
    let parent_lease = lease(&table, &parent);
    assert_eq!(parent_lease.checkpoint, Checkpoint::ShardEnd);
    assert_eq!(parent_lease.children, children.iter().cloned().collect::<BTreeSet<_>>());
    assert_eq!(count_lines(&log, &format!("processing shard={parent}")), 1, "the closed parent is taken once");
    assert_eq!(count_lines(&log, &format!("lease pass after the shard ended took 2 leases shard={parent}")), 1);
    for child in &children {
        let lease = lease(&table, child);
        assert_eq!(lease.parents, BTreeSet::from([parent.clone()]));
        assert_eq!(lease.owner, None, "released on the graceful stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_waits_for_both_parents() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("merge"), 2).await;
    let parents: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    for (i, parent) in parents.iter().enumerate() {
        stream.put(parent, &payloads(&format!("p{i}"), 20)).await;
    }
    let child = stream.merge(&parents[0], &parents[1]).await;
    stream.put(&child, &payloads("merged", 20)).await;

    let application = unique("merge-app");
    let mut host = start("counter", &stream.name, &application, "worker-1");
    host.wait_for("all 60 records", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= 60).await;
    let delivered = host.delivered().await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));

    let shards = by_shard(&delivered);
    assert_eq!(shards[&child], payloads("merged", 20));
    let first_child = delivered.iter().position(|d| d.shard == child).unwrap();
    for parent in &parents {
        let last = delivered.iter().rposition(|d| &d.shard == parent).unwrap();
        assert!(last < first_child, "{parent} must be done before the merged child starts");
    }
    let table = leases(&aws.dynamodb, &application).await;
    for parent in &parents {
        assert_eq!(lease(&table, parent).checkpoint, Checkpoint::ShardEnd);
    }
    assert_eq!(lease(&table, &child).parents, parents.iter().cloned().collect::<BTreeSet<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lease_is_taken_in_the_first_pass() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("four"), 4).await;
    let mut host = start("noop", &stream.name, &unique("four-app"), "worker-1");
    host.wait_for("the first lease pass", LIMIT, |log| log.iter().any(|l| l.contains("first lease pass done"))).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let pass = log.iter().find(|l| l.contains("first lease pass done")).unwrap();
    assert!(pass.ends_with("leases=4"), "{pass}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_shard_end_when_the_processor_fails_in_shutdown() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("failend"), 1).await;
    let parent = stream.shards().await[0].id.clone();
    stream.put(&parent, &["one".to_owned(), "fail-shutdown".to_owned()]).await;
    let children = stream.split(&parent).await;

    let application = unique("failend-app");
    let mut host = start("faulty", &stream.name, &application, "worker-1");
    let failed = "shutdown(shard-end) failed, so SHARD_END was not written";
    host.wait_for("two failed shard ends", LIMIT, |log| log.iter().filter(|l| l.contains(failed)).count() >= 2).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));

    let table = leases(&aws.dynamodb, &application).await;
    assert_ne!(lease(&table, &parent).checkpoint, Checkpoint::ShardEnd, "never skipped");
    for child in &children {
        assert_eq!(count_lines(&log, &format!("processing shard={child}")), 0, "children wait for their parent");
    }
    // Each attempt started over from the last checkpoint: the records came again.
    assert!(count_lines(&log, " one shard=") >= 2, "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_another_worker_resumes_from_the_last_checkpoint() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("crash"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let records = payloads("r", 250);
    stream.put(&shard, &records).await;

    // The counter checkpoints after records 100 and 200; then the worker dies.
    let application = unique("crash-app");
    let mut first = start("counter", &stream.name, &application, "worker-1");
    first.wait_for("250 records", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= 250).await;
    first.kill().await;
    let table = leases(&aws.dynamodb, &application).await;
    let crashed = lease(&table, &shard);
    assert_eq!(crashed.owner.as_deref(), Some("worker-1"), "a crash releases nothing");

    let mut second = start_with("counter", &stream.name, &application, "worker-2", &["--failover-time", "1s"]);
    second.wait_for("the records after the checkpoint", LIMIT, |log| {
        log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= 50
    }).await;
    let delivered = second.delivered().await;
    let (status, log) = second.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let again: Vec<String> = delivered.iter().map(|d| d.data.clone()).collect();
    assert_eq!(again, records[200..].to_vec(), "resumes right after the checkpoint at r-199, nothing skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_past_retention_ends_and_its_child_runs() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("aged"), 1).await;
    let child = stream.shards().await[0].id.clone();
    let records = payloads("c", 10);
    stream.put(&child, &records).await;
    // The child's parent aged out of the stream, but its lease was never finished.
    let application = unique("aged-app");
    let parent = "shardId-000000000099".to_owned();
    let rows = [
        Lease::new(&parent, Checkpoint::TrimHorizon, BTreeSet::new()),
        Lease::new(&child, Checkpoint::TrimHorizon, BTreeSet::from([parent.clone()])),
    ];
    write_leases(&aws.dynamodb, &application, &rows).await;

    let mut host = start("counter", &stream.name, &application, "worker-1");
    host.wait_for("the child's records", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= 10).await;
    let delivered = host.delivered().await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(by_shard(&delivered)[&child], records);
    assert_eq!(count_lines(&log, "past retention"), 1, "{}", log.join("\n"));
    let table = leases(&aws.dynamodb, &application).await;
    assert_eq!(lease(&table, &parent).checkpoint, Checkpoint::ShardEnd, "ended as if at SHARD_END");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_timestamp_lease_without_a_timestamp_is_refused() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("stamp"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let application = unique("stamp-app");
    // Created by a worker started with --initial-position AT_TIMESTAMP.
    write_leases(&aws.dynamodb, &application, &[Lease::new(&shard, Checkpoint::AtTimestamp, BTreeSet::new())]).await;

    let host = start("counter", &stream.name, &application, "worker-1");
    let (status, log) = host.wait_exit(LIMIT).await;
    assert!(!status.success(), "refused, not read from the trim horizon:\n{}", log.join("\n"));
    assert_eq!(count_lines(&log, "--initial-timestamp"), 2, "the error says how to fix it:\n{}", log.join("\n"));
    assert_eq!(count_lines(&log, "kcl_host::guest: initialize"), 0, "nothing delivered");
    assert_eq!(lease(&leases(&aws.dynamodb, &application).await, &shard).owner, None, "the lease is given back");
}

/// A worker paused (SIGSTOP) in the middle of a batch, past the failover
/// time, while another takes its shard: once continued, it delivers nothing
/// more of that batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_delivers_nothing_after_its_lease_is_taken() {
    const SIGSTOP: i32 = 19;
    const SIGCONT: i32 = 18;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("paused"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    stream.put(&shard, &["a".to_owned(), "stall".to_owned(), "b".to_owned(), "c".to_owned()]).await;
    let application = unique("paused-app");
    let fast = ["--failover-time", "2s"];
    let mut first = start_with("faulty", &stream.name, &application, "worker-1", &fast);
    // One shard, two workers: the second is at its share with none, so it
    // only takes the shard once the first stops renewing.
    first.wait_for("the first record", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(" a shard="))).await;
    first.signal(SIGSTOP); // inside the 3 s stall, mid-batch
    let mut second = start_with("faulty", &stream.name, &application, "worker-2", &fast);
    second.wait_for("the whole batch, taken over", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(" c shard="))).await;
    first.signal(SIGCONT);
    first.wait_for("the stopped call", LIMIT, |log| log.iter().any(|l| l.contains("validity ran out during process-records"))).await;

    let (a, log_a) = first.interrupt().await;
    let (b, log_b) = second.interrupt().await;
    assert!(a.success() && b.success(), "{}\n{}", log_a.join("\n"), log_b.join("\n"));
    let records = |log: &[String]| -> Vec<String> {
        log.iter()
            .filter(|l| l.contains("kcl_host::guest: record "))
            .map(|l| l.rsplit_once(" shard=").unwrap().0.rsplit(' ').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(records(&log_a), ["a"], "nothing after the pause from the first worker:\n{}", log_a.join("\n"));
    assert_eq!(records(&log_b), ["a", "stall", "b", "c"], "all of it from the second (nothing was checkpointed)");
}

/// Runs `kcl-host` to its exit with `env` set (a variable given as "" is
/// removed); returns (exit code, everything it printed).
async fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kcl-host"));
    command.args(args).env("NO_COLOR", "1");
    for (name, value) in env {
        match value.is_empty() {
            true => command.env_remove(name),
            false => command.env(name, value),
        };
    }
    let output = command.output().await.expect("kcl-host runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), text)
}

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
    kcl_host::control::ControlTable::new(aws.dynamodb.clone(), &other).ensure().await.unwrap();
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
            "no AWS credentials were found for ListShards: set AWS_ACCESS_KEY_ID",
        ),
        (vec!["run", &counter, "--stream", "s", "--application", &long_application], vec![], "use 3 to 237 characters (it names the lease table"),
        (vec!["run", &counter, "--stream", "s", "--application", "app", "--idle-time-between-reads", "-1s"], vec![], "use a duration with a unit"),
        (vec!["run", &counter, "--stream", "arn:aws:sqs:us-east-2:1:q", "--application", "app"], vec![], "give a stream name or a Kinesis stream ARN"),
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

/// Two workers on a 4-shard stream, balanced: the second joined once the
/// first held all four, and was given two of them.
struct Pair {
    aws: AwsClients,
    stream: TestStream,
    application: String,
    first: KclHost,
    /// `None` once the test stopped it.
    second: Option<KclHost>,
    /// Every record put so far.
    records: BTreeSet<String>,
}

const PAIR_FLAGS: [&str; 2] = ["--failover-time", "1s"];

impl Pair {
    async fn start(name: &str) -> Self {
        let aws = clients().await;
        let stream = TestStream::create(&aws.kinesis, &unique(name), 4).await;
        let application = unique(&format!("{name}-app"));
        let mut records = BTreeSet::new();
        put_all(&stream, "before", &mut records).await;
        let mut first = start_with("counter", &stream.name, &application, "worker-1", &PAIR_FLAGS);
        first.wait_for("all four shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 4).await;
        let mut second = start_with("counter", &stream.name, &application, "worker-2", &PAIR_FLAGS);
        // The first gives two leases back (after a checkpoint); the second takes them.
        first.wait_for("two leases given back", LIMIT, |log| count_lines(log, "gave the lease back") >= 2).await;
        second.wait_for("two leases", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
        Pair { aws, stream, application, first, second: Some(second), records }
    }

    fn second(&mut self) -> &mut KclHost {
        self.second.as_mut().expect("still running")
    }

    async fn put(&mut self, phase: &str) {
        put_all(&self.stream, phase, &mut self.records).await;
    }

    async fn owners(&self) -> BTreeMap<String, usize> {
        let mut owners = BTreeMap::new();
        for lease in leases(&self.aws.dynamodb, &self.application).await {
            *owners.entry(lease.owner.unwrap_or_default()).or_default() += 1;
        }
        owners
    }
}

/// Puts 10 records on every shard of `stream`, noting them in `records`.
async fn put_all(stream: &TestStream, phase: &str, records: &mut BTreeSet<String>) {
    for shard in stream.shards().await {
        let put = payloads(&format!("{phase}-{}", shard.id), 10);
        stream.put(&shard.id, &put).await;
        records.extend(put);
    }
}

/// Whether the records in `log` and `others` include every one of `expected`.
fn covers(log: &[String], others: &[Delivered], expected: &BTreeSet<String>) -> bool {
    let seen: BTreeSet<String> =
        log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).chain(others.iter().cloned()).map(|d| d.data).collect();
    seen.is_superset(expected)
}

/// Records delivered by any worker, each with how many times it came.
fn delivery_counts<'a>(all: impl IntoIterator<Item = &'a Delivered>) -> BTreeMap<&'a str, (usize, &'a Delivered)> {
    let mut counts: BTreeMap<&str, (usize, &Delivered)> = BTreeMap::new();
    for d in all {
        counts.entry(d.data.as_str()).or_insert((0, d)).0 += 1;
    }
    counts
}

fn delivered_set(counts: &BTreeMap<&str, (usize, &Delivered)>) -> BTreeSet<String> {
    counts.keys().map(|k| k.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_worker_is_given_its_share_without_duplicates() {
    let mut pair = Pair::start("join").await;
    assert_eq!(pair.owners().await, BTreeMap::from([("worker-1".into(), 2), ("worker-2".into(), 2)]));
    pair.put("after").await;
    let total = pair.records.len();
    // Each worker processes the new records of the shards it holds; a shard
    // is read in order, so by then what came before on it is done too (by
    // the first before it gave the shard away, or by the second after).
    let owners: BTreeMap<String, String> =
        leases(&pair.aws.dynamodb, &pair.application).await.into_iter().map(|l| (l.key, l.owner.unwrap_or_default())).collect();
    let after_on = |worker: &str| -> BTreeSet<String> {
        pair.records.iter().filter(|r| owners.iter().any(|(shard, owner)| owner == worker && r.starts_with(&format!("after-{shard}-")))).cloned().collect()
    };
    let (first_after, second_after) = (after_on("worker-1"), after_on("worker-2"));
    pair.first.wait_for("the first's new records", LIMIT, |log| covers(log, &[], &first_after)).await;
    pair.second().wait_for("the second's new records", LIMIT, |log| covers(log, &[], &second_after)).await;
    let (by_first, by_second) = (pair.first.delivered().await, pair.second().delivered().await);
    let counts = delivery_counts(by_first.iter().chain(&by_second));
    assert_eq!(delivered_set(&counts), pair.records, "every record processed, none lost");
    // A lease is given back after a checkpoint: nothing is delivered twice.
    assert_eq!(by_first.len() + by_second.len(), total, "no duplicates");
    let (a, log_a) = pair.first.interrupt().await;
    let (b, log_b) = pair.second.take().unwrap().interrupt().await;
    assert!(a.success() && b.success(), "{}\n{}", log_a.join("\n"), log_b.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_hands_its_shards_over_without_duplicates() {
    const SIGTERM: i32 = 15;
    let mut pair = Pair::start("handoff").await;
    pair.second().signal(SIGTERM);
    let (status, log_second) = pair.second.take().unwrap().wait_exit(LIMIT).await;
    assert!(status.success(), "{}", log_second.join("\n"));
    pair.put("after").await;
    let total = pair.records.len();
    let by_second: Vec<Delivered> = log_second.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).collect();
    let expected = pair.records.clone();
    pair.first.wait_for("every record", LIMIT, |log| covers(log, &by_second, &expected)).await;
    assert_eq!(pair.owners().await, BTreeMap::from([("worker-1".into(), 4)]), "the first took all four");
    let by_first = pair.first.delivered().await;
    let counts = delivery_counts(by_first.iter().chain(&by_second));
    assert_eq!(delivered_set(&counts), pair.records, "every record processed, none lost");
    assert_eq!(by_first.len() + by_second.len(), total, "the stopping worker checkpointed: no duplicates");
    let (a, log_a) = pair.first.interrupt().await;
    assert!(a.success(), "{}", log_a.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_is_replaced_and_only_records_after_its_checkpoints_come_twice() {
    let mut pair = Pair::start("failover").await;
    pair.put("middle").await;
    pair.second().wait_for("its half of the middle records", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 20).await;
    let before_kill = pair.second().delivered().await;
    pair.second.take().unwrap().kill().await;
    let checkpoints: BTreeMap<String, Checkpoint> =
        leases(&pair.aws.dynamodb, &pair.application).await.into_iter().map(|l| (l.key, l.checkpoint)).collect();
    pair.put("after").await;
    let expected = pair.records.clone();
    pair.first.wait_for("every record", LIMIT, |log| covers(log, &before_kill, &expected)).await;
    assert_eq!(pair.owners().await, BTreeMap::from([("worker-1".into(), 4)]), "the survivor took all four");
    let by_first = pair.first.delivered().await;
    let counts = delivery_counts(by_first.iter().chain(&before_kill));
    assert_eq!(delivered_set(&counts), pair.records, "every record processed, none lost");
    for (data, (n, d)) in &counts {
        if *n > 1 {
            let after = match &checkpoints[&d.shard] {
                Checkpoint::At(position) => {
                    let cp = position.sequence_number();
                    (d.sequence_number.len(), d.sequence_number.as_str()) > (cp.len(), cp)
                }
                _ => true,
            };
            assert!(after, "{data} came {n} times though its shard had checkpointed past it");
        }
    }
    let (a, log_a) = pair.first.interrupt().await;
    assert!(a.success(), "{}", log_a.join("\n"));
}

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

/// `GET path` on a local HTTP server: (status line, body).
async fn http_get(address: &str, path: &str) -> (String, String) {
    http(address, "GET", path, "text/plain", b"").await
}

/// One request to a local HTTP server: (status line, body).
async fn http(address: &str, method: &str, path: &str, content_type: &str, body: &[u8]) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("the admin listener accepts");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a full response");
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// The value of the series `name` whose labels include `shard="<shard>"`, from Prometheus text.
fn series(text: &str, name: &str, shard: Option<&str>) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        let (metric, labels) = key.split_once('{').unwrap_or((key, ""));
        let shard_ok = shard.is_none_or(|s| labels.contains(&format!("shard=\"{s}\"")));
        (metric == name && shard_ok).then(|| value.parse().ok()).flatten()
    })
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
    let control = kcl_host::control::ControlTable::new(aws.dynamodb.clone(), &application);
    control.ensure().await.unwrap();
    let running = kcl_host::control::Version { hash: "abc".into(), source: "/p.wasm".into(), component: Some("orders@1.3.0".into()) };
    control.beat("kcl-1", &running, "test pid 1", true).await.unwrap();
    let wanted = kcl_host::control::Version { hash: "def".into(), source: "/q.wasm".into(), component: None };
    control.deploy(&wanted, Some(&running)).await.unwrap();
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

/// The swap tests' versions, as the host names them on every guest line
/// (the build stamps each guest with its package's name and version).
const V1: &str = "(kcl-example-counter@0.1.0)";
const V2: &str = "(kcl-test-guest-tagged@2.0.0)";

/// Every record the counter or the tagged guest logged, in log order.
fn delivered(log: &[String]) -> Vec<Delivered> {
    log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).collect()
}

/// Records processed by v2.
fn by_v2(log: &[String]) -> Vec<Delivered> {
    delivered(log).into_iter().filter(|d| d.processor.ends_with(V2)).collect()
}

/// A component that exports the processor interface by name with the wrong
/// functions: what a build against another WIT gives.
fn wrong_world() -> Vec<u8> {
    wat::parse_str(
        r#"(component
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func $f (canon lift (core func $i "f")))
             (instance $processor (export "initialize" (func $f)))
             (export "kcl:processor/record-processor@0.2.0" (instance $processor)))"#,
    )
    .unwrap()
}

/// The four ways to ask a running worker for a new version.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Trigger {
    /// SIGHUP: the same path, read again.
    Sighup,
    /// `--watch`: the path is a symlink, pointed at a new file (as a Kubernetes ConfigMap update does).
    Watch,
    /// `POST /swap` on the admin listener: the file's bytes and its path in turn.
    Post,
    /// `kcl-host deploy`, which the worker follows from the control table.
    Deploy,
}

/// One worker on an 8-shard stream under a steady producer, running v1 (the
/// counter) from `dir/processor.wasm`.
struct SwapRig {
    aws: AwsClients,
    application: String,
    dir: tempfile::TempDir,
    admin: String,
    host: KclHost,
    producer: kcl_testkit::producer::Producer,
    trigger: Trigger,
    shards: Vec<String>,
    /// Offers posted so far (`Trigger::Post`).
    posts: usize,
}

impl SwapRig {
    async fn start(trigger: Trigger) -> Self {
        let aws = clients().await;
        let stream = TestStream::create(&aws.kinesis, &unique("swap"), 8).await;
        let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(kcl_testkit::guest("counter"), dir.path().join("v1.wasm")).unwrap();
        std::os::unix::fs::symlink("v1.wasm", dir.path().join("processor.wasm")).unwrap();
        let application = unique("swap-app");
        let admin = format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
        let (path, cache) = (dir.path().join("processor.wasm").display().to_string(), test_cache_dir().display().to_string());
        let mut args = vec![
            "run", &path, "--stream", &stream.name, "--application", &application, "--worker-id", "worker-1",
            "--idle-time-between-reads", "200ms", "--cache-dir", &cache,
        ];
        match trigger {
            Trigger::Watch => args.push("--watch"),
            Trigger::Post => args.extend(["--admin-listen", admin.as_str()]),
            Trigger::Sighup | Trigger::Deploy => {}
        }
        let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
        let producer = kcl_testkit::producer::Producer::start(&stream, "p", Duration::from_millis(100)).await;
        host.wait_for("v1 on every shard", LIMIT, |log| {
            let on: BTreeSet<String> = delivered(log).into_iter().filter(|d| d.processor.ends_with(V1)).map(|d| d.shard).collect();
            on.len() == shards.len()
        })
        .await;
        Self { aws, application, dir, admin, host, producer, trigger, shards, posts: 0 }
    }

    /// Offers `bytes`, saved as `dir/<name>`, through the rig's trigger:
    /// `Err` with the refusal when the worker (or `deploy`) refuses it.
    async fn offer(&mut self, name: &str, bytes: &[u8]) -> Result<(), String> {
        const SIGHUP: i32 = 1;
        let file = self.dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let path = self.dir.path().join("processor.wasm");
        match self.trigger {
            Trigger::Sighup => {
                let answers = count_lines(&self.host.log().await, "SIGHUP: ");
                std::fs::rename(&file, &path).unwrap();
                self.host.signal(SIGHUP);
                self.answer("SIGHUP: ", answers).await
            }
            Trigger::Watch => {
                let answers = count_lines(&self.host.log().await, "--watch: ");
                let next = self.dir.path().join("processor.wasm.next");
                std::os::unix::fs::symlink(name, &next).unwrap();
                std::fs::rename(&next, &path).unwrap();
                self.answer("--watch: ", answers).await
            }
            Trigger::Post => {
                self.posts += 1;
                let (status, body) = match self.posts % 2 {
                    1 => http(&self.admin, "POST", "/swap", "application/wasm", bytes).await,
                    _ => http(&self.admin, "POST", "/swap", "text/plain", file.display().to_string().as_bytes()).await,
                };
                if status.contains(" 200 ") { Ok(()) } else { Err(format!("{status}: {body}")) }
            }
            Trigger::Deploy => {
                let (code, text) = run_to_exit(&["deploy", &file.display().to_string(), "--application", &self.application], &[]).await;
                if code == 0 { Ok(()) } else { Err(text) }
            }
        }
    }

    /// The worker's answer for `trigger` after the `before` it gave already:
    /// a swap, or its refusal.
    async fn answer(&mut self, trigger: &str, before: usize) -> Result<(), String> {
        self.host.wait_for("the worker's answer", LIMIT, |log| count_lines(log, trigger) > before).await;
        let answer = self.host.log().await.into_iter().filter(|l| l.contains(trigger)).nth(before).unwrap();
        if answer.contains("not swapping") { Err(answer) } else { Ok(()) }
    }
}

/// Every acceptance check of a swap by `trigger`: two bad files refused with
/// v1 running on; v2 on every shard at a batch boundary, under a steady
/// producer; every record processed once; no lease changed hands.
async fn swap_under_load(trigger: Trigger) {
    let mut rig = SwapRig::start(trigger).await;
    let refused = rig.offer("not-wasm.wasm", b"a text file").await.expect_err("not wasm is refused");
    assert!(refused.contains("is not a WebAssembly file"), "{trigger:?}: {refused}");
    let refused = rig.offer("wrong-world.wasm", &wrong_world()).await.expect_err("the wrong world is refused");
    assert!(refused.contains("does not fit the kcl:processor@0.2.0 world") && refused.contains("process-records"), "{trigger:?}: {refused}");

    let v2 = std::fs::read(kcl_testkit::guest("tagged")).unwrap();
    rig.offer("v2.wasm", &v2).await.unwrap_or_else(|e| panic!("{trigger:?}: v2 refused: {e}"));
    let shards = rig.shards.clone();
    rig.host.wait_for("every shard swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= shards.len()).await;
    rig.host
        .wait_for("v2's batches on every shard", LIMIT, |log| {
            let v2 = by_v2(log);
            shards.iter().all(|s| v2.iter().filter(|d| &d.shard == s).count() >= 3)
        })
        .await;
    let produced = rig.producer.stop().await;
    rig.host
        .wait_for("every record produced", LIMIT, |log| {
            let seen: BTreeSet<String> = delivered(log).into_iter().map(|d| d.data).collect();
            produced.iter().all(|(_, data)| seen.contains(data))
        })
        .await;
    let table = leases(&rig.aws.dynamodb, &rig.application).await;
    let (status, log) = rig.host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let all = log.join("\n");

    // Every record once, on its shard. The counter checkpoints in
    // shutdown(requested), which the swap calls: none comes twice.
    let delivered = delivered(&log);
    let counts = delivery_counts(&delivered);
    for (shard, data) in &produced {
        match counts.get(data.as_str()) {
            None => panic!("{trigger:?}: {data} lost\n{all}"),
            Some((n, d)) => assert!(*n == 1 && &d.shard == shard, "{trigger:?}: {data} delivered {n} times, on {}", d.shard),
        }
    }
    assert_eq!(delivered.len(), produced.len(), "{trigger:?}: nothing but what was produced");
    let swaps: Vec<&String> = log.iter().filter(|l| l.contains("swapped the processor")).collect();
    assert_eq!(swaps.len(), shards.len(), "{trigger:?}: one swap per shard:\n{all}");
    assert!(swaps.iter().all(|l| l.contains("; 0 records since the last checkpoint delivered again")), "{trigger:?}: {swaps:#?}");

    // Each shard: v1 up to its swap, v2 after it.
    for shard in &shards {
        let at = log.iter().position(|l| l.contains("swapped the processor") && l.contains(&format!("shard={shard} "))).unwrap();
        for (i, line) in log.iter().enumerate() {
            let Some(d) = kcl_testkit::process::parse_delivered(line).filter(|d| &d.shard == shard) else { continue };
            let want = if i < at { V1 } else { V2 };
            assert!(d.processor.ends_with(want), "{trigger:?}: {} on {shard} by {}, expected {want}", d.data, d.processor);
        }
    }
    assert!(table.iter().all(|l| l.owner.as_deref() == Some("worker-1")), "{trigger:?}: no lease changed owner: {table:#?}");
    assert_eq!(count_lines(&log, "processing shard="), shards.len(), "{trigger:?}: the leases were never released");
    let summary = log.iter().find(|l| l.contains("stopped after")).unwrap();
    let (_, versions) = summary.rsplit_once("; processor ").unwrap();
    assert!(versions.contains(V1) && versions.contains(" -> ") && versions.ends_with(V2), "the exit line names both: {summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_eight_shards_under_load_and_refuses_bad_files() {
    swap_under_load(Trigger::Sighup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_swaps_eight_shards_under_load_when_the_symlink_moves() {
    swap_under_load(Trigger::Watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_swap_swaps_eight_shards_under_load_and_refuses_bad_files() {
    swap_under_load(Trigger::Post).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_swaps_eight_shards_under_load_and_refuses_bad_files() {
    swap_under_load(Trigger::Deploy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_delivers_what_came_after_the_last_checkpoint_again_from_memory() {
    swap_after_records_past_the_checkpoint("256", "; 5 records since the last checkpoint delivered again").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_over_the_buffer_restarts_the_shard_from_its_checkpoint_and_loses_nothing() {
    swap_after_records_past_the_checkpoint("0", "did not fit --swap-buffer-mib, so the shard restarts from it").await;
}

/// Five records on each of two shards processed by a version that never
/// checkpoints, then a swap with `--swap-buffer-mib buffer`: each shard's
/// log says `outcome`, and v2 is given those five again, in order, then
/// what came after — from memory, or read again from Kinesis.
async fn swap_after_records_past_the_checkpoint(buffer: &str, outcome: &str) {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("redeliver"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    for shard in &shards {
        stream.put(shard, &payloads(&format!("before-{shard}"), 5)).await;
    }
    // v1 is the faulty guest, which never checkpoints: all it was given
    // comes after the last checkpoint (the lease's TRIM_HORIZON).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("faulty"), &path).unwrap();
    let application = unique("redeliver-app");
    let (processor, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--idle-time-between-reads", "200ms",
        "--cache-dir", &cache, "--swap-canary-batches", "0", "--swap-buffer-mib", buffer,
    ];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("v1's 10 records", LIMIT, |log| delivered(log).len() >= 10).await;
    std::fs::copy(kcl_testkit::guest("tagged"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("both shards on v2", LIMIT, |log| count_lines(log, outcome) >= 2).await;
    for shard in &shards {
        stream.put(shard, &payloads(&format!("after-{shard}"), 3)).await;
    }
    host.wait_for("v2's records", LIMIT, |log| by_v2(log).len() >= 16).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));

    assert_eq!(count_lines(&log, outcome), 2, "{}", log.join("\n"));
    let (v1, v2): (Vec<Delivered>, Vec<Delivered>) = delivered(&log).into_iter().partition(|d| !d.processor.ends_with(V2));
    for shard in &shards {
        let on = |records: &[Delivered]| records.iter().filter(|d| &d.shard == shard).map(|d| d.sequence_number.clone()).collect::<Vec<_>>();
        let (by_v1, by_v2) = (on(&v1), on(&v2));
        assert_eq!(by_v1.len(), 5, "{shard}: v1 processed the first five");
        assert_eq!(by_v2[..5], by_v1[..], "{shard}: v2 was given v1's five again, in order, before anything new");
        assert_eq!(by_v2.len(), 8, "{shard}: then the three put after the swap, once");
    }
}

/// The processor hash on the first line of `log` that contains `needle`.
fn log_processor_hash(log: &[String], needle: &str) -> String {
    let line = log.iter().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} line"));
    let (_, rest) = line.split_once("processor=\"").unwrap_or_else(|| panic!("no processor on {line}"));
    rest.chars().take_while(char::is_ascii_hexdigit).collect()
}

/// Reads the control table until every heartbeat row of the application's
/// `workers` reports `hash` (each is rewritten every third of the failover time).
async fn heartbeats_report(aws: &AwsClients, application: &str, hash: &str, workers: usize) {
    let control = kcl_host::control::ControlTable::new(aws.dynamodb.clone(), application);
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let read = control.read().await.unwrap();
        let running: Vec<String> = read.heartbeats.iter().filter_map(|h| Some(h.running.as_ref()?.hash.clone())).collect();
        if running.len() == workers && running.iter().all(|r| r == hash) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the heartbeat reports {running:?}, not {hash}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_goes_to_a_canary_first_and_back_when_it_keeps_trapping() {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("rollback"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    let application = unique("rollback-app");
    let admin = format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let (processor, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--idle-time-between-reads", "200ms",
        "--cache-dir", &cache, "--swap-canary-batches", "1", "--swap-rollback-after", "3", "--admin-listen", &admin,
        "--failover-time", "1s",
    ];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;

    // v2 (the faulty guest) goes to one shard; one good batch there promotes it.
    std::fs::copy(kcl_testkit::guest("faulty"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("the canary", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    let log = host.log().await;
    let canary = log.iter().find(|l| l.contains("canary: this shard")).unwrap().rsplit_once("shard=").unwrap().1.trim_matches('"').to_owned();
    assert_eq!(count_lines(&log, "swapped the processor"), 1, "only the canary swapped");
    stream.put(&canary, &["fine-on-v2".to_owned()]).await;
    host.wait_for("the rest swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    let v2 = log_processor_hash(&host.log().await, "swapped the processor");
    heartbeats_report(&aws, &application, &v2, 1).await;

    // v2 traps on `panic`: three failures roll every shard back to v1, which processes it all.
    let mut all = vec!["fine-on-v2".to_owned()];
    for shard in &shards {
        let records = vec!["panic".to_owned(), format!("after-{shard}")];
        stream.put(shard, &records).await;
        all.extend(records.into_iter().filter(|r| r != "panic"));
    }
    host.wait_for("the rollback", LIMIT, |log| count_lines(log, "rolling back to") >= 1).await;
    host.wait_for("v1 on the rest", LIMIT, |log| shards.iter().all(|s| log.iter().any(|l| l.contains(" record ") && l.contains(&format!(" after-{s} after-{s} "))))).await;
    // The heartbeat reports the version the worker went back to.
    let v1 = log_processor_hash(&host.log().await, "processing shard=");
    heartbeats_report(&aws, &application, &v1, 1).await;
    let (_, metrics) = http_get(&admin, "/metrics").await;
    assert_eq!(series(&metrics, "kcl_host_processor_rollbacks_total", None), Some(1.0), "{metrics}");
    for shard in &shards {
        let swaps = series(&metrics, "kcl_host_processor_swaps_total", Some(shard)).unwrap_or_default();
        assert!(swaps >= 1.0, "{shard} swapped to v2 and back: {metrics}");
    }
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let panics_by_v1 = log.iter().filter(|l| l.contains("kcl_host::guest: record ") && l.contains(" panic panic ")).count();
    assert_eq!(panics_by_v1, 2, "v1 processed both `panic` records after the rollback:\n{}", log.join("\n"));
    for record in &all {
        assert!(log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(&format!(" {record} "))), "{record} lost:\n{}", log.join("\n"));
    }
    assert_eq!(count_lines(&log, "rolling back to"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_swaps_every_worker_and_rollback_brings_them_back() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("deploy"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let application = unique("deploy-app");
    let flags = ["--failover-time", "1s", "--swap-canary-batches", "0"];
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &flags);
    first.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let mut second = start_with("counter", &stream.name, &application, "worker-2", &flags);
    second.wait_for("its share", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;

    // Deployed from a file only this machine has, gone before the workers look:
    // they load it from the component table.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v2.wasm");
    std::fs::copy(kcl_testkit::guest("tagged"), &file).unwrap();
    let (code, text) = run_to_exit(&["deploy", &file.display().to_string(), "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("dynamodb://{application}-KclHostComponents/")), "{text}");
    std::fs::remove_file(&file).unwrap();
    for worker in [&mut first, &mut second] {
        worker.wait_for("the deployed version", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    }
    let (v1, v2) = (log_processor_hash(&first.log().await, "processing shard="), log_processor_hash(&first.log().await, "swapped the processor"));
    heartbeats_report(&aws, &application, &v2, 2).await;
    for shard in &shards {
        stream.put(shard, &[format!("v2-{shard}")]).await;
    }
    // Each worker's shard is processed by v2.
    for worker in [&mut first, &mut second] {
        worker.wait_for("a record by v2", LIMIT, |log| by_v2(log).iter().any(|d| d.data.starts_with("v2-"))).await;
    }

    let (code, text) = run_to_exit(&["deploy", "--rollback", "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    for worker in [&mut first, &mut second] {
        worker.wait_for("the version before", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    }
    heartbeats_report(&aws, &application, &v1, 2).await;
    let (a, log_a) = first.interrupt().await;
    let (b, log_b) = second.interrupt().await;
    assert!(a.success() && b.success(), "{}\n{}", log_a.join("\n"), log_b.join("\n"));
    for log in [&log_a, &log_b] {
        assert_eq!(count_lines(log, "deploy "), 2, "a swap to the deployed version, then back:\n{}", log.join("\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_idle_stream_the_canary_is_promoted_after_its_idle_time() {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("idle-canary"), 2).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("processor.wasm");
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    let application = unique("idle-canary-app");
    let (processor, cache) = (path.display().to_string(), test_cache_dir().display().to_string());
    let args = ["run", &processor, "--stream", &stream.name, "--application", &application, "--cache-dir", &cache];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    std::fs::copy(kcl_testkit::guest("tagged"), &path).unwrap();
    host.signal(SIGHUP);
    // No record comes: the canary gets none of its 3 batches, and the rollout goes on anyway.
    host.wait_for("both shards swapped", LIMIT, |log| count_lines(log, "swapped the processor") >= 2).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "the canary ran 10s (0 batches) without failing: every shard swaps"), 1, "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_fails_the_canary_input_is_refused() {
    const SIGHUP: i32 = 1;
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("canary-input"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let dir = tempfile::tempdir().unwrap();
    let (path, sample) = (dir.path().join("processor.wasm"), dir.path().join("sample.jsonl"));
    std::fs::copy(kcl_testkit::guest("counter"), &path).unwrap();
    std::fs::write(&sample, "{\"data\": \"fine\"}\n{\"data\": \"panic\"}\n").unwrap();
    let application = unique("canary-input-app");
    let (processor, cache, sample) = (path.display().to_string(), test_cache_dir().display().to_string(), sample.display().to_string());
    let args = [
        "run", &processor, "--stream", &stream.name, "--application", &application, "--idle-time-between-reads", "200ms",
        "--cache-dir", &cache, "--swap-canary-input", &sample,
    ];
    let mut host = KclHost::spawn(env!("CARGO_BIN_EXE_kcl-host").as_ref(), &args);
    host.wait_for("the shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    // The faulty guest traps on `panic`, which the sample has.
    std::fs::copy(kcl_testkit::guest("faulty"), &path).unwrap();
    host.signal(SIGHUP);
    host.wait_for("the refusal", LIMIT, |log| count_lines(log, "it failed on --swap-canary-input") >= 1).await;
    stream.put(&shard, &["still-v1".to_owned()]).await;
    host.wait_for("v1's record", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(" still-v1 still-v1 "))).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "swapped the processor"), 0, "no shard swapped");
}
