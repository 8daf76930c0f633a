//! Several workers on one stream: joining, stopping and dying workers,
//! and which records come twice.

use super::*;
use kcl_testkit::faults::{Fault, FaultProxy, Rule};
use kcl_testkit::java_kcl3;

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
        owners(&self.aws, &self.application).await
    }
}

/// How many leases each worker owns ("" for none).
pub(super) async fn owners(aws: &AwsClients, application: &str) -> BTreeMap<String, usize> {
    let mut owners = BTreeMap::new();
    for lease in leases(&aws.dynamodb, application).await {
        *owners.entry(lease.owner.unwrap_or_default()).or_default() += 1;
    }
    owners
}

/// Reads the lease table until the owners are `expected`: leases move
/// after checkpoints, and nothing in a log says the last one has.
pub(super) async fn owners_become(aws: &AwsClients, application: &str, expected: BTreeMap<String, usize>) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let now = owners(aws, application).await;
        if now == expected {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the leases' owners are still {now:?}, not {expected:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Puts 10 records on every open shard of `stream`, noting them in `records`.
pub(super) async fn put_all(stream: &TestStream, phase: &str, records: &mut BTreeSet<String>) {
    for shard in stream.shards().await.into_iter().filter(|s| !s.closed) {
        let put = payloads(&format!("{phase}-{}", shard.id), 10);
        stream.put(&shard.id, &put).await;
        records.extend(put);
    }
}

/// Whether the records in `log` and `others` include every one of `expected`.
pub(super) fn covers(log: &[String], others: &[Delivered], expected: &BTreeSet<String>) -> bool {
    let seen: BTreeSet<String> =
        log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).chain(others.iter().cloned()).map(|d| d.data).collect();
    seen.is_superset(expected)
}

/// Every record delivered more than once came after its shard's checkpoint
/// as the lease table showed it at the kill.
pub(super) fn only_after_checkpoints_twice(counts: &BTreeMap<&str, (usize, &Delivered)>, checkpoints: &BTreeMap<String, Checkpoint>) {
    for (data, (n, d)) in counts {
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
}

pub(super) fn delivered_set(counts: &BTreeMap<&str, (usize, &Delivered)>) -> BTreeSet<String> {
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
        leases(&pair.aws.dynamodb, &pair.application).await.into_iter().map(|l| (l.key.into(), l.owner.unwrap_or_default())).collect();
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
async fn a_child_its_parents_owner_has_no_room_for_is_taken_by_the_other_worker_at_once() {
    // The default failover time: a settled fleet scans the lease table only
    // every two minutes, longer than a test waits, so the other worker
    // must learn of the child from the heartbeats.
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("news"), 3).await;
    let application = unique("news-app");
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &[]);
    first.wait_for("all three shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 3).await;
    let mut second = start_with("counter", &stream.name, &application, "worker-2", &[]);
    first.wait_for("a lease given back", LIMIT, |log| count_lines(log, "gave the lease back") >= 1).await;
    second.wait_for("its share", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    owners_become(&aws, &application, BTreeMap::from([("worker-1".into(), 2), ("worker-2".into(), 1)])).await;
    for worker in [&mut first, &mut second] {
        worker.wait_for("a settled table", LIMIT, |log| count_lines(log, "every lease is held by a live kcl-host worker") >= 1).await;
    }
    // Split one of the first's: it finishes the parent and has room for one child only.
    let parent = leases(&aws.dynamodb, &application).await.into_iter().find(|l| l.owner.as_deref() == Some("worker-1")).unwrap().key;
    let children = stream.split(&parent).await;
    let records: Vec<String> = children.iter().map(|child| format!("child-{child}")).collect();
    for (child, record) in children.iter().zip(&records) {
        stream.put(child, std::slice::from_ref(record)).await;
    }
    second.wait_for("the child the first had no room for", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    first.wait_for("the first's child", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 4).await;
    let child_owners: BTreeSet<String> =
        leases(&aws.dynamodb, &application).await.into_iter().filter(|l| children.contains(&l.key.to_string())).filter_map(|l| l.owner).collect();
    assert_eq!(child_owners, BTreeSet::from(["worker-1".to_owned(), "worker-2".to_owned()]), "one child each");
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let seen: BTreeSet<String> = first.delivered().await.into_iter().chain(second.delivered().await).map(|d| d.data).collect();
        if records.iter().all(|r| seen.contains(r)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the children's records were never processed: {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (a, log_a) = first.interrupt().await;
    let (b, log_b) = second.interrupt().await;
    assert!(a.success() && b.success(), "{}\n{}", log_a.join("\n"), log_b.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_hands_its_shards_over_without_duplicates() {
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
        leases(&pair.aws.dynamodb, &pair.application).await.into_iter().map(|l| (l.key.into(), l.checkpoint)).collect();
    pair.put("after").await;
    let expected = pair.records.clone();
    pair.first.wait_for("every record", LIMIT, |log| covers(log, &before_kill, &expected)).await;
    assert_eq!(pair.owners().await, BTreeMap::from([("worker-1".into(), 4)]), "the survivor took all four");
    let by_first = pair.first.delivered().await;
    let counts = delivery_counts(by_first.iter().chain(&before_kill));
    assert_eq!(delivered_set(&counts), pair.records, "every record processed, none lost");
    only_after_checkpoints_twice(&counts, &checkpoints);
    let (a, log_a) = pair.first.interrupt().await;
    assert!(a.success(), "{}", log_a.join("\n"));
}

/// A fleet that reads the heartbeats seldom (`--fleet-heartbeat-reads 1`:
/// the worker that is not a watcher reads every 2 s) loses its watcher to
/// kill -9: the deputy takes the leases the watcher held as soon as it is
/// dead (all of them, unless the third worker, a watcher from then on,
/// takes one at the same moment), and the fleet balances again (the
/// deputy giving its excess back after a checkpoint). Every record is
/// processed; only records after a checkpoint come twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_watcher_is_covered_by_its_deputy_and_the_fleet_balances_again() {
    const FLAGS: [&str; 4] = ["--failover-time", "4s", "--fleet-heartbeat-reads", "1"];
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("cover"), 6).await;
    let application = unique("cover-app");
    let mut records = BTreeSet::new();
    put_all(&stream, "before", &mut records).await;
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &FLAGS);
    first.wait_for("all six shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 6).await;
    let mut second = start_with("counter", &stream.name, &application, "worker-2", &FLAGS);
    let mut third = start_with("counter", &stream.name, &application, "worker-3", &FLAGS);
    for worker in [&mut second, &mut third] {
        worker.wait_for("two shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    }
    put_all(&stream, "middle", &mut records).await;
    // The watcher processes the new records of its shards (and so checkpoints some).
    let mine: BTreeSet<String> = leases(&aws.dynamodb, &application)
        .await
        .into_iter()
        .filter(|l| l.is_owned_by("worker-1"))
        .flat_map(|l| payloads(&format!("middle-{}", l.key), 10))
        .collect();
    first.wait_for("its middle records", LIMIT, |log| covers(log, &[], &mine)).await;
    let before_kill = first.delivered().await;
    first.kill().await;
    let checkpoints: BTreeMap<String, Checkpoint> =
        leases(&aws.dynamodb, &application).await.into_iter().map(|l| (l.key.into(), l.checkpoint)).collect();
    put_all(&stream, "after", &mut records).await;

    second.wait_for("the deputy covering for the watcher", LIMIT, |log| count_lines(log, "as a watcher, taking every lease it left") >= 1).await;
    owners_become(&aws, &application, BTreeMap::from([("worker-2".into(), 3), ("worker-3".into(), 3)])).await;
    let expected = records.clone();
    let by_third = third.delivered().await;
    second.wait_for("every record", LIMIT, |log| covers(log, &[before_kill.clone(), by_third.clone()].concat(), &expected)).await;

    let (by_second, by_third) = (second.delivered().await, third.delivered().await);
    let counts = delivery_counts(before_kill.iter().chain(&by_second).chain(&by_third));
    assert_eq!(delivered_set(&counts), records, "every record processed, none lost");
    only_after_checkpoints_twice(&counts, &checkpoints);
    for worker in [second, third] {
        let (status, log) = worker.interrupt().await;
        assert!(status.success(), "{}", log.join("\n"));
    }
}

/// A mixed fleet's setup: a 4-shard stream with 10 records on each shard,
/// and an application whose lease table is on the DynamoDB Java KCL 3.x
/// can use.
struct MixedFleet {
    aws: AwsClients,
    endpoint: String,
    stream: TestStream,
    application: String,
    /// Every record put so far.
    records: BTreeSet<String>,
}

impl MixedFleet {
    /// Both kinds judge leases by their counters, with the same failover time.
    const FAILOVER_MS: u64 = 4_000;

    async fn new(name: &str) -> Self {
        let aws = java_kcl3::clients().await;
        let stream = TestStream::create(&aws.kinesis, &unique(name), 4).await;
        let mut records = BTreeSet::new();
        put_all(&stream, "before", &mut records).await;
        MixedFleet { aws, endpoint: java_kcl3::dynamodb_endpoint(), stream, application: unique(&format!("{name}-app")), records }
    }

    /// A kcl-host worker, renewing each lease (`--lease-renewal per-lease`,
    /// as docs/OPERATIONS.md says to set before a Java worker joins).
    fn kcl_host(&self, worker: &str) -> KclHost {
        self.kcl_host_at(worker, &self.endpoint)
    }

    /// [`Self::kcl_host`] with its DynamoDB calls sent to `endpoint` (a fault proxy).
    fn kcl_host_at(&self, worker: &str, endpoint: &str) -> KclHost {
        let failover = format!("{}ms", Self::FAILOVER_MS);
        let flags = ["--failover-time", &failover, "--lease-renewal", "per-lease"];
        start_with_env("counter", &self.stream.name, &self.application, worker, &flags, &[("AWS_ENDPOINT_URL_DYNAMODB", endpoint)])
    }

    fn java(&self, worker: &str) -> KclHost {
        java_kcl3::spawn(&self.stream.name, &self.application, worker, Self::FAILOVER_MS)
    }

    /// The records of `phase` on the shards `worker` owns now.
    async fn on_shards_of(&self, worker: &str, phase: &str) -> BTreeSet<String> {
        let theirs: Vec<String> =
            leases(&self.aws.dynamodb, &self.application).await.into_iter().filter(|l| l.is_owned_by(worker)).map(|l| l.key.into()).collect();
        self.records.iter().filter(|r| theirs.iter().any(|shard| r.starts_with(&format!("{phase}-{shard}-")))).cloned().collect()
    }
}

/// Moving back to Java KCL 3.x, shard by shard. A 3.x worker started beside
/// a kcl-host worker that holds all four leases gets its share: kcl-host
/// counts it by its metrics row and gives two leases back after a
/// checkpoint, and the 3.x leader assigns them to it. Once kcl-host stops,
/// it gets the other two. Both judge leases by their counters, so neither
/// takes a lease the other holds. Every record is processed once: each
/// lease moves after a checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_kcl_3_worker_gets_its_share_from_kcl_host_and_every_shard_once_it_stops() {
    let mut fleet = MixedFleet::new("kcl3").await;
    let (aws, application) = (fleet.aws.clone(), fleet.application.clone());
    let mut host = fleet.kcl_host("kcl-host-1");
    host.wait_for("all four shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 4).await;

    let mut java = fleet.java("java-1");
    host.wait_for("two leases given back to the 3.x worker", LIMIT, |log| count_lines(log, "gave the lease back") >= 2).await;
    assert!(count_lines(&host.log().await, r#"count toward each worker's share workers={"java-1"}"#) >= 1, "counted by its metrics row");
    owners_become(&aws, &application, BTreeMap::from([("kcl-host-1".into(), 2), ("java-1".into(), 2)])).await;
    assert_kcl3_table(&aws, &application).await;
    let (code, status) = run_to_exit(&["status", "--application", &application], &[("AWS_ENDPOINT_URL_DYNAMODB", &fleet.endpoint)]).await;
    let java_row = status.lines().find(|l| l.starts_with("java-1 ")).unwrap_or_default();
    assert!(code == 0 && java_row.contains(" 2  3.x report "), "status shows the 3.x worker and its report:\n{status}");
    put_all(&fleet.stream, "shared", &mut fleet.records).await;
    let shared_on_theirs = fleet.on_shards_of("java-1", "shared").await;
    java.wait_for("the 3.x worker's shared records", LIMIT, |log| covers(log, &[], &shared_on_theirs)).await;

    host.signal(SIGTERM);
    let (status, host_log) = host.wait_exit(LIMIT).await;
    assert!(status.success(), "{}", host_log.join("\n"));
    owners_become(&aws, &application, BTreeMap::from([("java-1".into(), 4)])).await;
    put_all(&fleet.stream, "after", &mut fleet.records).await;
    let by_host: Vec<Delivered> = host_log.iter().filter_map(|l| kcl_testkit::process::parse_delivered(l)).collect();
    let expected = fleet.records.clone();
    java.wait_for("every record", LIMIT, |log| covers(log, &by_host, &expected)).await;

    let by_java = java.delivered().await;
    let counts = delivery_counts(by_host.iter().chain(&by_java));
    assert_eq!(delivered_set(&counts), fleet.records, "every record processed, none lost");
    assert_eq!(by_host.len() + by_java.len(), fleet.records.len(), "each lease moved after a checkpoint: no duplicates");
    let java_log = java.log().await;
    assert_eq!(count_lines(&host_log, "the lease was taken by another worker"), 0, "the 3.x leader took no lease kcl-host held");
    assert_eq!(count_lines(&java_log, "checkpoint refused"), 0, "kcl-host took no lease the 3.x worker held");
    java.kill().await;
}

/// The move back to 3.x under faults and a reshard. kcl-host's DynamoDB
/// calls go through the fault proxy, which throttles its first scans (lease
/// scans and heartbeat reads), fails some of its writes with a 500 and loses
/// the answer to one write it applied; and one of kcl-host's shards is split
/// once the 3.x worker holds its share. The 3.x worker still gets its share,
/// the parent is processed to its end and its children after it, by
/// whichever kind takes them, and every record is processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_kcl_3_worker_gets_its_share_through_faults_and_a_reshard() {
    let mut fleet = MixedFleet::new("kcl3-faults").await;
    let (aws, application) = (fleet.aws.clone(), fleet.application.clone());
    let proxy = FaultProxy::start(&fleet.endpoint).await;
    let mut host = fleet.kcl_host_at("kcl-host-1", &proxy.endpoint);
    host.wait_for("all four shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 4).await;
    let rule = |operation, fault, times| Rule { table: None, times: Some(times), ..Rule::every(Some(operation), fault) };
    proxy.set(vec![
        rule("Scan", Fault::Fail(400, "ProvisionedThroughputExceededException"), 3),
        rule("UpdateItem", Fault::Fail(500, "InternalFailure"), 3),
        rule("UpdateItem", Fault::LoseAnswer, 1),
    ]);

    let java = fleet.java("java-1");
    host.wait_for("two leases given back to the 3.x worker", LIMIT, |log| count_lines(log, "gave the lease back") >= 2).await;
    owners_become(&aws, &application, BTreeMap::from([("kcl-host-1".into(), 2), ("java-1".into(), 2)])).await;
    assert!(proxy.counts().faulted >= 7, "every fault was applied: {:?}", proxy.counts().faulted);
    let parent = leases(&aws.dynamodb, &application).await.into_iter().find(|l| l.is_owned_by("kcl-host-1")).expect("a lease of kcl-host").key;
    let children = fleet.stream.split(&parent).await;
    put_all(&fleet.stream, "after", &mut fleet.records).await;
    assert!(children.iter().all(|child| fleet.records.iter().any(|r| r.starts_with(&format!("after-{child}-")))), "records on both children");

    let expected = fleet.records.clone();
    let deadline = tokio::time::Instant::now() + LIMIT * 2;
    let (by_host, by_java) = loop {
        let (by_host, by_java) = (host.delivered().await, java.delivered().await);
        let seen: BTreeSet<String> = by_host.iter().chain(&by_java).map(|d| d.data.clone()).collect();
        if seen.is_superset(&expected) {
            break (by_host, by_java);
        }
        let missing: Vec<&String> = expected.difference(&seen).take(5).collect();
        assert!(tokio::time::Instant::now() < deadline, "records never processed, e.g. {missing:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let counts = delivery_counts(by_host.iter().chain(&by_java));
    assert_eq!(delivered_set(&counts), fleet.records, "every record processed, none lost");
    let finished = lease(&leases(&aws.dynamodb, &application).await, &parent).checkpoint.clone();
    assert_eq!(finished, Checkpoint::ShardEnd, "the parent was processed to its end");
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    java.kill().await;
}

/// The lease table is a Java KCL 3.x table: the index 3.x adds, and the
/// rows it keeps beside the leases.
async fn assert_kcl3_table(aws: &AwsClients, application: &str) {
    let table = aws.dynamodb.describe_table().table_name(application).send().await.unwrap().table.unwrap();
    let indexes: Vec<&str> = table.global_secondary_indexes().iter().filter_map(|i| i.index_name()).collect();
    assert_eq!(indexes, ["LeaseOwnerToLeaseKeyIndex"]);
    let rows = aws.dynamodb.scan().table_name(application).send().await.unwrap();
    let kinds: BTreeSet<&str> = rows.items().iter().filter_map(|row| row.get("entityType")?.as_s().ok().map(String::as_str)).collect();
    assert!(kinds.is_superset(&BTreeSet::from(["LEADER", "CLIENT_VERSION_MIGRATION", "WORKER_METRIC_STATS"])), "{kinds:?}");
}

/// The other way: a kcl-host worker joins a fleet of one Java KCL 3.x
/// worker on a table 3.x made (its lease rows marked `entityType` `LEASE`)
/// and takes its share by stealing, one lease at a time, as it does from
/// Java KCL 2.x; the 3.x leader leaves the leases kcl-host renews alone.
/// Every record is processed; only records after the checkpoint kcl-host
/// started a stolen shard from come twice (the batch the 3.x worker was
/// processing when its lease was taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcl_host_joins_a_java_kcl_3_fleet_and_steals_its_share() {
    // 3.x's first start on a new table is slow: about 70 s before its first lease.
    const FIRST_START: Duration = Duration::from_secs(240);
    let mut fleet = MixedFleet::new("kcl3-join").await;
    let (aws, application) = (fleet.aws.clone(), fleet.application.clone());
    let mut java = fleet.java("java-1");
    let before = fleet.records.clone();
    java.wait_for("every record, by the 3.x worker alone", FIRST_START, |log| covers(log, &[], &before)).await;
    assert_kcl3_table(&aws, &application).await;

    let mut host = fleet.kcl_host("kcl-host-1");
    owners_become(&aws, &application, BTreeMap::from([("kcl-host-1".into(), 2), ("java-1".into(), 2)])).await;
    put_all(&fleet.stream, "after", &mut fleet.records).await;
    // Each processes the new records of the shards it holds (and so what
    // came before them on those shards).
    let (host_after, java_after) = (fleet.on_shards_of("kcl-host-1", "after").await, fleet.on_shards_of("java-1", "after").await);
    host.wait_for("its new records", LIMIT, |log| covers(log, &[], &host_after)).await;
    java.wait_for("its new records", LIMIT, |log| covers(log, &[], &java_after)).await;

    let (by_host, by_java) = (host.delivered().await, java.delivered().await);
    let counts = delivery_counts(by_host.iter().chain(&by_java));
    assert_eq!(delivered_set(&counts), fleet.records, "every record processed, none lost");
    let host_log = host.log().await;
    let started_from: BTreeMap<String, Checkpoint> = host_log
        .iter()
        .filter_map(|line| {
            let (_, rest) = line.split_once("kcl_host::guest: initialize ")?;
            let (shard, rest) = rest.split_once(" from ")?;
            let checkpoint = rest.split(' ').next()?.split('/').next()?;
            Some((shard.to_owned(), Checkpoint::parse(checkpoint, 0)?))
        })
        .collect();
    assert_eq!(started_from.len(), 2, "kcl-host started the two shards it stole: {started_from:?}");
    assert!(counts.values().all(|(n, d)| *n == 1 || started_from.contains_key(&d.shard)), "only stolen shards have records twice");
    only_after_checkpoints_twice(&counts, &started_from);
    assert_eq!(count_lines(&host_log, "the lease was taken by another worker"), 0, "the 3.x leader took no lease kcl-host held");
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    java.kill().await;
}
