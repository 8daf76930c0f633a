//! The seed's scenario and its relatives, end to end: `kcl-host run` as a
//! process against the local Kinesis and DynamoDB servers.
//!
//! Needs `scripts/servers.sh start` and `scripts/build-guests.sh` first
//! (`scripts/test.sh` does both).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use kcl_host::lease::{Checkpoint, Lease};
use kcl_testkit::process::{Delivered, KclHost};
use kcl_testkit::{clients, leases, unique, TestStream};

/// Generous: the servers are slow on a loaded 2-core machine. Nothing waits
/// this long unless something is broken.
const LIMIT: Duration = Duration::from_secs(90);

fn guest(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/build").join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run scripts/build-guests.sh", path.display());
    path.display().to_string()
}

fn payloads(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn start(guest_name: &str, stream: &str, application: &str, worker: &str) -> KclHost {
    let processor = guest(guest_name);
    KclHost::spawn(
        env!("CARGO_BIN_EXE_kcl-host").as_ref(),
        &[
            "run", &processor, "--stream", stream, "--application", application, "--worker-id", worker,
            "--idle-time-between-reads", "200ms", "--no-cache",
        ],
    )
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

fn count_lines(log: &[String], needle: &str) -> usize {
    log.iter().filter(|l| l.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_reshard_is_processed_end_to_end() {
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
    let mut host = start("counter", &stream.name, &application, "worker-1");
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
