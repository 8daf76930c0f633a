//! One deliverer per shard in heartbeat mode (the default renewal), for
//! real processes: workers that start at once, join one by one, die and come
//! back, or read the fleet's heartbeats through a failing network never
//! deliver one shard at overlapping times.
//!
//! Judged from the logs alone: a process's *tenure* of a shard runs from the
//! first record it delivers after an `initialize` of that shard to the last
//! one it delivers before its next `initialize` (or its end). No two
//! processes' tenures of one shard may overlap, and every record put is
//! delivered.

use kcl_testkit::faults::{Fault, FaultProxy, Rule};
use kcl_testkit::producer::Producer;

use super::faults::{start_through, upstream};
use super::fleet::owners;
use super::*;

const FLAGS: [&str; 2] = ["--failover-time", "3s"];

/// A process's delivery of a shard, from its log.
#[derive(Debug)]
struct Tenure {
    shard: String,
    process: String,
    /// Timestamps of its first and last record (RFC 3339, one width: they
    /// sort as text).
    first: String,
    last: String,
}

/// Every tenure in `log`, the log of `process`.
fn tenures(process: &str, log: &[String]) -> Vec<Tenure> {
    let mut open: BTreeMap<String, Tenure> = BTreeMap::new();
    let mut done = Vec::new();
    for line in log {
        let Some(time) = line.split_whitespace().next() else { continue };
        if let Some((_, rest)) = line.split_once("kcl_host::guest: initialize ") {
            let shard = rest.split_whitespace().next().unwrap_or_default();
            done.extend(open.remove(shard));
        } else if let Some(record) = kcl_testkit::process::parse_delivered(line) {
            let tenure = open.entry(record.shard.clone()).or_insert_with(|| Tenure {
                shard: record.shard.clone(),
                process: process.to_owned(),
                first: time.to_owned(),
                last: time.to_owned(),
            });
            tenure.last = time.to_owned();
        }
    }
    done.extend(open.into_values());
    done
}

/// The overlaps between tenures of one shard by different processes.
fn overlaps(tenures: &[Tenure]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, a) in tenures.iter().enumerate() {
        for b in &tenures[i + 1..] {
            if a.shard == b.shard && a.process != b.process && a.first <= b.last && b.first <= a.last {
                found.push(format!("{}: {} {}..{} and {} {}..{}", a.shard, a.process, a.first, a.last, b.process, b.first, b.last));
            }
        }
    }
    found
}

/// The workers of one test, each process named `worker#n` (a restart under
/// the same id is another process), and the logs of those that ended.
struct Fleet {
    shards: usize,
    aws: AwsClients,
    stream: TestStream,
    application: String,
    running: Vec<(String, KclHost)>,
    ended: Vec<(String, Vec<String>)>,
    started: usize,
    /// Each worker's flags.
    flags: Vec<&'static str>,
}

impl Fleet {
    async fn new(name: &str, shards: usize) -> Self {
        Self::with_flags(name, shards, &FLAGS).await
    }

    async fn with_flags(name: &str, shards: usize, flags: &[&'static str]) -> Self {
        let aws = clients().await;
        let stream = TestStream::create(&aws.kinesis, &unique(name), shards as i32).await;
        let application = unique(&format!("{name}-app"));
        Fleet { shards, aws, stream, application, running: Vec::new(), ended: Vec::new(), started: 0, flags: flags.to_vec() }
    }

    fn add(&mut self, worker: &str, host: KclHost) {
        self.started += 1;
        self.running.push((format!("{worker}#{}", self.started), host));
    }

    fn start(&mut self, worker: &str) {
        let host = start_with("counter", &self.stream.name, &self.application, worker, &self.flags);
        self.add(worker, host);
    }

    /// Kills `worker` with SIGKILL, keeping what it logged.
    async fn kill(&mut self, worker: &str) {
        let at = self.running.iter().position(|(name, _)| name.starts_with(&format!("{worker}#"))).expect("running");
        let (name, host) = self.running.remove(at);
        let log = host.log().await;
        host.kill().await;
        self.ended.push((name, log));
    }

    /// Waits until the running workers hold every lease, each its share.
    async fn balanced(&mut self) {
        for (_, host) in &mut self.running {
            host.wait_for("its first lease pass", LIMIT, |log| count_lines(log, "first lease pass done") >= 1).await;
        }
        let workers: BTreeSet<String> = self.running.iter().map(|(name, _)| name.split('#').next().unwrap().to_owned()).collect();
        let (low, high) = (self.shards / workers.len(), self.shards.div_ceil(workers.len()));
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let owners = owners(&self.aws, &self.application).await;
            let fair = workers.iter().all(|w| owners.get(w).is_some_and(|n| (low..=high).contains(n)));
            if fair && owners.values().sum::<usize>() == self.shards {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "not balanced over {workers:?}: {owners:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every shard's owner has checkpointed twice more (in
    /// heartbeat mode only checkpoints and takes move a lease's counter):
    /// any worker still delivering a shard it lost has met a checkpoint
    /// refused by then, and its deliveries are in the logs.
    async fn checkpointed_twice(&self) {
        let counters = |leases: Vec<Lease>| leases.into_iter().map(|l| (l.key.to_string(), l.counter)).collect::<BTreeMap<_, _>>();
        let before = counters(leases(&self.aws.dynamodb, &self.application).await);
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let now = counters(leases(&self.aws.dynamodb, &self.application).await);
            if before.iter().all(|(shard, counter)| now.get(shard).is_some_and(|n| *n >= counter + 2)) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "not every shard checkpointed twice: {before:?} then {now:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops `producer`, waits until every record it put was delivered,
    /// stops every worker, and checks the tenures.
    async fn finish(mut self, producer: Producer) {
        let produced: BTreeSet<String> = producer.stop().await.into_iter().map(|(_, data)| data).collect();
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let mut seen: BTreeSet<String> = self.ended.iter().flat_map(|(_, log)| delivered(log)).map(|d| d.data).collect();
            for (_, host) in &self.running {
                seen.extend(host.delivered().await.into_iter().map(|d| d.data));
            }
            let missing = produced.difference(&seen).count();
            if missing == 0 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{missing} of {} records never delivered", produced.len());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for (name, host) in std::mem::take(&mut self.running) {
            let (status, log) = host.interrupt().await;
            assert!(status.success(), "{name} stopped with {status}");
            self.ended.push((name, log));
        }
        let all: Vec<Tenure> = self.ended.iter().flat_map(|(name, log)| tenures(name, log)).collect();
        let shards: BTreeSet<&str> = all.iter().map(|t| t.shard.as_str()).collect();
        assert_eq!(shards.len(), self.shards, "every shard was delivered");
        let found = overlaps(&all);
        assert!(found.is_empty(), "{} overlaps, a shard delivered by two processes at once:\n{}", found.len(), found.join("\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_that_start_at_once_join_one_by_one_or_die_and_come_back_never_deliver_one_shard_together() {
    let mut fleet = Fleet::new("one-deliverer", 8).await;
    let producer = Producer::start(&fleet.stream, "r", Duration::from_millis(50)).await;
    // Three at once, twice: each joins before it has read the others' heartbeats.
    for worker in ["w1", "w2", "w3"] {
        fleet.start(worker);
    }
    fleet.balanced().await;
    for worker in ["w1", "w2", "w3"] {
        fleet.kill(worker).await;
    }
    for worker in ["w1", "w2", "w3"] {
        fleet.start(worker);
    }
    fleet.balanced().await;
    // One more, on its own.
    fleet.start("w4");
    fleet.balanced().await;
    // kill -9, and back under the same id.
    fleet.kill("w2").await;
    fleet.start("w2");
    fleet.balanced().await;
    // kill -9, and a new worker instead.
    fleet.kill("w3").await;
    fleet.start("w5");
    fleet.balanced().await;
    fleet.checkpointed_twice().await;
    fleet.finish(producer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_of_four_instances_per_shard_that_join_and_die_never_deliver_one_shard_together() {
    let mut fleet = Fleet::with_flags("one-deliverer-par", 6, &[FLAGS[0], FLAGS[1], "--parallelism", "4"]).await;
    let producer = Producer::start(&fleet.stream, "r", Duration::from_millis(50)).await;
    fleet.start("w1");
    fleet.start("w2");
    fleet.balanced().await;
    fleet.start("w3");
    fleet.balanced().await;
    fleet.kill("w1").await;
    fleet.balanced().await;
    fleet.checkpointed_twice().await;
    fleet.finish(producer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_heartbeat_reads_fail_takes_nothing_from_a_worker_that_took_leases_meanwhile() {
    // Nine shards: w3 holds four, one short of its share of five, while w1
    // holds five; nothing is free, and a heartbeating worker is not stolen from.
    let mut fleet = Fleet::new("unread-taker", 9).await;
    // Ten records a second on each shard: the counter example checkpoints
    // every 100, so in heartbeat mode a lease's counter stands still for
    // about ten seconds at a time.
    let producer = Producer::start(&fleet.stream, "r", Duration::from_millis(100)).await;
    fleet.start("w1");
    fleet.balanced().await;
    // w3 reads DynamoDB through the proxy.
    let proxy = FaultProxy::start(&upstream("DYNAMODB")).await;
    let w3 = start_through(&proxy, "DYNAMODB", "counter", &fleet.stream.name, &fleet.application, "w3", &FLAGS);
    fleet.add("w3", w3);
    fleet.balanced().await;
    // From now on its reads of the control table fail: to w3, w1 stays live
    // after it dies, and w4, which joins and takes w1's five leases, is
    // never seen. w3 is short of its share all along.
    let control = format!("{}-KclHostControl", fleet.application);
    proxy.set(vec![Rule { table: None, operation: Some("Scan"), body_contains: Some(control), fault: Fault::Fail(500, "InternalFailure"), times: None }]);
    fleet.kill("w1").await;
    fleet.start("w4");
    let (_, w4) = fleet.running.iter_mut().find(|(name, _)| name.starts_with("w4#")).unwrap();
    w4.wait_for("w1's leases", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 5).await;
    // Every shard checkpointed twice more (about twenty seconds): over six
    // failover times of w4's still counters, and three take passes of w3's.
    fleet.checkpointed_twice().await;
    proxy.clear();
    fleet.balanced().await;
    fleet.checkpointed_twice().await;
    fleet.finish(producer).await;
}

#[test]
fn tenures_overlap_only_across_processes_of_one_shard() {
    let line = |time: &str, what: &str| format!("{time}  INFO worker{{worker=w}}: kcl_host::guest: {what} shard=\"s1\" processor=\"p\"");
    let a = [line("T1", "initialize s1 from TRIM_HORIZON"), line("T2", "record 1 k a"), line("T5", "record 2 k b")];
    let b = [line("T3", "initialize s1 from 1"), line("T4", "record 2 k b"), line("T6", "record 3 k c")];
    let all: Vec<Tenure> = tenures("a#1", &a).into_iter().chain(tenures("b#2", &b)).collect();
    assert_eq!(overlaps(&all).len(), 1, "a delivered until T5, b from T4: {all:?}");
    let b_later = [line("T6", "initialize s1 from 2"), line("T7", "record 3 k c")];
    let all: Vec<Tenure> = tenures("a#1", &a).into_iter().chain(tenures("b#2", &b_later)).collect();
    assert!(overlaps(&all).is_empty(), "{all:?}");
}
