//! A worker's own shards from start to end: the seed's reshard, merges,
//! closed shards, crashes, shards past retention, a paused worker.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end() {
    seed_scenario("counter", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end_by_four_instances_per_shard() {
    seed_scenario("counter", &["--parallelism", "4"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end_by_the_go_counter() {
    seed_scenario("go-counter", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end_by_the_python_counter() {
    seed_scenario("py-counter", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end_by_the_javascript_counter() {
    seed_scenario("js-counter", &[]).await;
}

/// The seed's scenario with a counter processor (Rust, Go, Python or
/// JavaScript, same logic), the worker started with `extra` flags. Each
/// record is its own partition key: with `--parallelism` only each key's
/// order is kept, so a shard's records are then compared as a set.
async fn seed_scenario(counter: &str, extra: &[&str]) {
    let one_instance = !extra.contains(&"--parallelism");
    seed_scenario_run(one_instance, |stream, application| start_with(counter, stream, application, "worker-1", extra)).await;
}

/// The seed's reshard processed by the worker `start(stream, application)`
/// starts: every record once, the parent's SHARD_END written by the host.
pub(super) async fn seed_scenario_run(one_instance: bool, start: impl FnOnce(&str, &str) -> KclHost) {
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
    let mut host = start(&stream.name, &application);
    host.wait_for("all 110 records", LIMIT, |log| log.iter().filter(|l| l.contains("kcl_host::guest: record ")).count() >= 110).await;
    let delivered = host.delivered().await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "graceful stop exits 0: {status:?}\n{}", log.join("\n"));

    // Every record of all three shards, each exactly once, in shard order
    // (one instance per shard).
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if one_instance {
        shards = by_shard(&delivered);
    } else {
        delivered.iter().for_each(|d| shards.entry(d.shard.clone()).or_default().push(d.data.clone()));
        shards.values_mut().for_each(|records| records.sort_by_key(|data| data.rsplit('-').next().unwrap().parse::<usize>().unwrap()));
    }
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
