//! Leases and reads under faults, through the test kit's fault proxy in
//! front of the DynamoDB or the Kinesis endpoint: a slow lease row, a
//! DynamoDB outage, Kinesis failing, and stops that do not wait forever.
//! Every record is accounted for from the logs and the lease table.

use kcl_testkit::faults::{Fault, FaultProxy, Rule};

use super::*;

const SIGINT: i32 = 2;

/// `kcl-host run` of `guest_name` with its `service` endpoint (`KINESIS`
/// or `DYNAMODB`) through `proxy`.
pub(super) fn start_through(proxy: &FaultProxy, service: &str, guest_name: &str, stream: &str, application: &str, worker: &str, extra: &[&str]) -> KclHost {
    let variable = format!("AWS_ENDPOINT_URL_{service}");
    start_with_env(guest_name, stream, application, worker, extra, &[(variable.as_str(), proxy.endpoint.as_str())])
}

/// Waits until the proxy has applied `n` faults.
pub(super) async fn faults_applied(proxy: &FaultProxy, n: u64) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while proxy.counts().faulted < n {
        assert!(tokio::time::Instant::now() < deadline, "the proxy applied {} faults, not {n}", proxy.counts().faulted);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn upstream(service: &str) -> String {
    std::env::var(format!("AWS_ENDPOINT_URL_{service}")).expect("the local servers' endpoints")
}

/// Each record's data, with how many times it was delivered.
fn times_delivered(log: &[String]) -> BTreeMap<String, usize> {
    let mut times = BTreeMap::new();
    for d in delivered(log) {
        *times.entry(d.data).or_default() += 1;
    }
    times
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slow_lease_row_moves_no_lease_and_delays_no_heartbeat() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("slow-row"), 4).await;
    let application = unique("slow-row-app");
    let proxy = FaultProxy::start(&upstream("DYNAMODB")).await;
    // The default failover time (10 s) and per-attempt time-out (5 s), as in
    // the field. A renewal per lease (as beside Java KCL): in heartbeat mode
    // nothing writes an idle lease's row, so a slow row cannot matter.
    let flags = ["--lease-renewal", "per-lease"];
    let mut first = start_through(&proxy, "DYNAMODB", "counter", &stream.name, &application, "worker-1", &flags);
    first.wait_for("every shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 4).await;
    let mut second = start_through(&proxy, "DYNAMODB", "counter", &stream.name, &application, "worker-2", &flags);
    second.wait_for("its share", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    first.wait_for("the share given away", LIMIT, |log| count_lines(log, "gave the lease back") >= 2).await;
    let owners = |leases: Vec<Lease>| leases.into_iter().map(|l| (l.key, l.owner)).collect::<BTreeMap<_, _>>();
    let before = owners(leases(&aws.dynamodb, &application).await);
    let slow = before.iter().find(|(_, owner)| owner.as_deref() == Some("worker-1")).map(|(key, _)| key.clone()).unwrap();

    // Every write of one of worker-1's rows is answered 6 s late: longer
    // than an attempt may take, shorter than the failover time.
    proxy.set(vec![Rule {
        table: None,
        operation: Some("UpdateItem"),
        body_contains: Some(format!(r#""S":"{slow}""#)),
        fault: Fault::Delay(Duration::from_secs(6)),
        times: None,
    }]);
    // Five slow writes: over 25 s, two and a half failover times.
    faults_applied(&proxy, 5).await;
    let after = owners(leases(&aws.dynamodb, &application).await);
    proxy.clear();
    let (_, log_a) = first.interrupt().await;
    let (_, log_b) = second.interrupt().await;
    for log in [&log_a, &log_b] {
        assert_eq!(judged_dead(log), 0, "no heartbeat was late:\n{}", log.join("\n"));
        // The slow row's own shard may pause: one renewal is out at a time,
        // and one answered 6 s late cannot keep a 10 s validity unbroken.
        let others_lost = log.iter().filter(|l| l.contains("lease lost") && !l.contains(&format!("shard={slow}"))).count();
        assert_eq!(others_lost, 0, "no other lease stopped:\n{}", log.join("\n"));
    }
    assert_eq!(before, after, "no lease moved, {slow} included");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_dynamodb_outage_every_shard_is_processing_again_at_once() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("ddb-outage"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let application = unique("ddb-outage-app");
    let proxy = FaultProxy::start(&upstream("DYNAMODB")).await;
    let admin = admin_address();
    let flags = ["--failover-time", "3s", "--admin-listen", &admin];
    let mut host = start_through(&proxy, "DYNAMODB", "counter", &stream.name, &application, "worker-1", &flags);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let mut all = Vec::new();
    for shard in &shards {
        all.extend(payloads(&format!("before-{shard}"), 3));
        stream.put(shard, &payloads(&format!("before-{shard}"), 3)).await;
    }
    host.wait_for("the first records", LIMIT, |log| processed(log, &all)).await;

    // Every DynamoDB request fails until the heartbeat is overdue and the
    // leases are gone, and a lease pass found it so; /healthz says so.
    proxy.set(vec![Rule::every(None, Fault::Fail(500, "InternalFailure"))]);
    host.wait_for("the leases lost", LIMIT, |log| count_lines(log, "lease lost") >= 2).await;
    // Each processor hears why it stops (its checkpoints refused), as the contract says.
    host.wait_for("shutdown(lease-lost) in both processors", LIMIT, |log| count_lines(log, "records: LeaseLost") >= 2).await;
    host.wait_for("a pass that takes nothing", LIMIT, |log| count_lines(log, "taking no leases: this worker's heartbeat is overdue") >= 1).await;
    let (status, body) = http_get(&admin, "/healthz").await;
    assert!(status.contains("503"), "{status}: {body}");
    for shard in &shards {
        all.push(format!("during-{shard}"));
        stream.put(shard, &[format!("during-{shard}")]).await;
    }
    proxy.clear();
    let back = tokio::time::Instant::now();
    host.wait_for("every shard again", LIMIT, |log| processed(log, &all)).await;
    let recovered = back.elapsed();
    eprintln!("DynamoDB outage: every shard processing again {recovered:?} after it ended");
    // Healthy again only while holding its leases.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (status, _) = http_get(&admin, "/healthz").await;
        if status.contains("200") {
            let (_, metrics) = http_get(&admin, "/metrics").await;
            assert_eq!(series(&metrics, "kcl_host_leases_held", None), Some(2.0), "healthy with its share: {metrics}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never healthy again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    // The defect: the next lease pass came two failover times (6 s) after
    // the one that found the heartbeat overdue, not when it was current again.
    assert!(recovered < Duration::from_secs(3), "idle {recovered:?} after the outage:\n{}", log.join("\n"));
    let times = times_delivered(&log);
    for data in &all {
        assert!(times.contains_key(data), "{data} lost");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_keep_the_leases_and_a_silent_dynamodb_is_left_behind_at_once() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("ddb-silent"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let proxy = FaultProxy::start(&upstream("DYNAMODB")).await;
    let mut host = start_through(&proxy, "DYNAMODB", "counter", &stream.name, &unique("ddb-silent-app"), "worker-1", &["--failover-time", "3s"]);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;

    // Heartbeats and renewals applied, their answers lost: each retry is recognised as this worker's own write.
    proxy.set(vec![Rule { table: None, operation: Some("UpdateItem"), body_contains: None, fault: Fault::LoseAnswer, times: Some(6) }]);
    faults_applied(&proxy, 6).await;
    let mut all = one_each(&stream, &shards, "after-lost-answers").await;
    host.wait_for("records after the lost answers", LIMIT, |log| processed(log, &all)).await;
    assert_eq!(count_lines(&host.log().await, "lease lost"), 0, "{}", host.log().await.join("\n"));

    // Then nothing answers at all until the leases are gone: hung requests
    // must not hold the heartbeat back once DynamoDB answers again.
    proxy.set(vec![Rule::every(None, Fault::BlackHole)]);
    host.wait_for("the leases lost", LIMIT, |log| count_lines(log, "lease lost") >= 2).await;
    // Each processor hears why it stops (its checkpoints refused), as the contract says.
    host.wait_for("shutdown(lease-lost) in both processors", LIMIT, |log| count_lines(log, "records: LeaseLost") >= 2).await;
    host.wait_for("a pass that takes nothing", LIMIT, |log| count_lines(log, "taking no leases: this worker's heartbeat is overdue") >= 1).await;
    all.extend(one_each(&stream, &shards, "during-silence").await);
    // DynamoDB answers again just after a heartbeat write went out into the silence (no lease is left to renew).
    let heartbeats = |proxy: &FaultProxy| proxy.counts().requests.iter().filter(|r| r.operation == "UpdateItem").count();
    let sent = heartbeats(&proxy);
    let deadline = tokio::time::Instant::now() + LIMIT;
    while heartbeats(&proxy) == sent {
        assert!(tokio::time::Instant::now() < deadline, "no heartbeat write during the silence");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.clear();
    let back = tokio::time::Instant::now();
    host.wait_for("every shard again", LIMIT, |log| processed(log, &all)).await;
    let recovered = back.elapsed();
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    // The hung write is given up after a third of the failover time, not
    // after the client's 5 s attempt time-out.
    assert!(recovered < Duration::from_secs(3), "idle {recovered:?} after DynamoDB answered again:\n{}", log.join("\n"));
}

/// Longest a test lets a silent DynamoDB request hold its caller: the
/// first-byte time-out (1 s) with room for a loaded machine, and well under
/// the 5 s attempt that held callers before.
const SILENCE_NOTICED: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_read_is_asked_again_without_waiting_out_its_time_out() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("kinesis-silent"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let proxy = FaultProxy::start(&upstream("KINESIS")).await;
    let mut host = start_through(&proxy, "KINESIS", "counter", &stream.name, &unique("kinesis-silent-app"), "worker-1", &[]);
    host.wait_for("the shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    // Two reads sent into the silence: the first, and one asked again beside it.
    proxy.set(vec![Rule::every(Some("GetRecords"), Fault::BlackHole)]);
    faults_applied(&proxy, 2).await;
    proxy.clear();
    let cleared = tokio::time::Instant::now();
    let records = payloads("after-silence", 3);
    stream.put(&shard, &records).await;
    host.wait_for("the records put after the silence", LIMIT, |log| processed(log, &records)).await;
    // The first read sent into the silence keeps its 30 s (a slow large
    // answer is not a silent one); the reader asked again long before.
    let reads: Vec<_> = proxy.counts().requests.into_iter().filter(|r| r.operation == "GetRecords").collect();
    let first_silent = reads.iter().find(|r| r.faulted).expect("a read went into the silence").at;
    let answered = reads.iter().find(|r| !r.faulted && r.at >= cleared).expect("a read once Kinesis answered again").at;
    let waited = answered - first_silent;
    assert!(waited < Duration::from_secs(20), "the next read went out {waited:?} after the first silent one, not before its 30 s time-out");
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(count_lines(&log, "GetRecords went unanswered; asked again") >= 1, "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_dynamodb_request_is_sent_again_after_a_second_and_no_lease_moves() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("ddb-hole"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let application = unique("ddb-hole-app");
    let proxy = FaultProxy::start(&upstream("DYNAMODB")).await;
    let mut host = start_through(&proxy, "DYNAMODB", "counter", &stream.name, &application, "worker-1", &[]);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    // A few seconds of silence, well within the failover time (10 s).
    proxy.set(vec![Rule::every(None, Fault::BlackHole)]);
    faults_applied(&proxy, 4).await;
    proxy.clear();
    let records = one_each(&stream, &shards, "after-silence").await;
    host.wait_for("the records put after the silence", LIMIT, |log| processed(log, &records)).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while proxy.counts().held > 0 {
        assert!(tokio::time::Instant::now() < deadline, "a silent request was never given up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited = proxy.counts().given_up_after;
    assert!(waited.iter().all(|w| *w < SILENCE_NOTICED), "each silent request was sent again after about a second: {waited:?}");
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "lease lost"), 0, "{}", log.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_read_failures_are_retried_in_place_and_deliver_nothing_twice() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("read-faults"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let proxy = FaultProxy::start(&upstream("KINESIS")).await;
    // The counter checkpoints every 100 records: what it processed since is
    // what a restart from the checkpoint would deliver again.
    let mut host = start_through(&proxy, "KINESIS", "counter", &stream.name, &unique("read-faults-app"), "worker-1", &[]);
    host.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let mut all = Vec::new();
    for shard in &shards {
        let records = payloads(&format!("before-{shard}"), 20);
        stream.put(shard, &records).await;
        all.extend(records);
    }
    host.wait_for("the first records", LIMIT, |log| processed(log, &all)).await;

    // A burst of 5xx, resets and a black-holed call, then records written meanwhile.
    proxy.set(vec![
        Rule { table: None, operation: Some("GetRecords"), body_contains: None, fault: Fault::Fail(500, "InternalFailure"), times: Some(6) },
        Rule { table: None, operation: Some("GetRecords"), body_contains: None, fault: Fault::Fail(503, "ServiceUnavailable"), times: Some(4) },
        Rule { table: None, operation: Some("GetRecords"), body_contains: None, fault: Fault::Reset, times: Some(4) },
    ]);
    for shard in &shards {
        let records = payloads(&format!("during-{shard}"), 20);
        stream.put(shard, &records).await;
        all.extend(records);
    }
    faults_applied(&proxy, 14).await;
    let back = tokio::time::Instant::now();
    host.wait_for("every record", LIMIT, |log| processed(log, &all)).await;
    eprintln!("a burst of 14 failed GetRecords calls: every record processed {:?} after the last", back.elapsed());
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "restarting from the last checkpoint"), 0, "no shard restarted:\n{}", log.join("\n"));
    assert!(count_lines(&log, "trying again in place") >= 1, "{}", log.join("\n"));
    let times = times_delivered(&log);
    for data in &all {
        assert_eq!(times.get(data), Some(&1), "{data}: delivered once\n{}", log.join("\n"));
    }
}

/// A ResourceNotFoundException for a shard its stream still lists (local
/// servers give one for a sequence number they cannot place) is a read to
/// try again, not a deleted stream: the worker goes on and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_answered_not_found_for_a_listed_shard_is_tried_again_and_the_worker_goes_on() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("not-found"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let proxy = FaultProxy::start(&upstream("KINESIS")).await;
    let mut host = start_through(&proxy, "KINESIS", "counter", &stream.name, &unique("not-found-app"), "worker-1", &[]);
    let mut all = payloads("before", 10);
    stream.put(&shard, &all).await;
    host.wait_for("the first records", LIMIT, |log| processed(log, &all)).await;

    let not_found = |operation| Rule { table: None, operation: Some(operation), body_contains: None, fault: Fault::Fail(400, "ResourceNotFoundException"), times: Some(2) };
    proxy.set(vec![not_found("GetRecords"), not_found("GetShardIterator")]);
    let during = payloads("during", 10);
    stream.put(&shard, &during).await;
    all.extend(during);
    faults_applied(&proxy, 4).await;
    host.wait_for("every record", LIMIT, |log| processed(log, &all)).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(count_lines(&log, &format!("exists and lists shard {shard}; reading it again")) >= 1, "{}", log.join("\n"));
    let times = times_delivered(&log);
    for data in &all {
        assert!(times.contains_key(data), "{data}: delivered\n{}", log.join("\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once_during_a_long_call() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("second-signal"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let application = unique("second-signal-app");
    // A call deadline past every wait here: only the second signal ends the stop.
    let mut host = start_with("faulty", &stream.name, &application, "worker-1", &["--call-deadline", "300s"]);
    host.wait_for("the shard", LIMIT, |log| count_lines(log, "processing shard=") >= 1).await;
    stream.put(&shard, &["before".to_owned(), "spin".to_owned()]).await;
    host.wait_for("the record before the spin", LIMIT, |log| log.iter().any(|l| l.contains("kcl_host::guest: record ") && l.contains(" before"))).await;
    host.signal(SIGINT);
    host.wait_for("what the stop waits for", LIMIT, |log| count_lines(log, "stopping: waiting for 1 processors to shut down") >= 1).await;
    host.signal(SIGINT);
    let (status, log) = host.wait_exit(LIMIT).await;
    assert_eq!(status.code(), Some(130), "{}", log.join("\n"));
    assert_eq!(count_lines(&log, "stopping at once on a second signal"), 1, "{}", log.join("\n"));
    // Nothing lost: the faulty guest never checkpoints, so the next owner reads the shard again from its start.
    let table = leases(&aws.dynamodb, &application).await;
    assert_eq!(lease(&table, &shard).checkpoint, Checkpoint::TrimHorizon, "{table:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_a_worker_id_in_use_refuses_to_start() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("same-id"), 2).await;
    let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
    let application = unique("same-id-app");
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &[]);
    first.wait_for("both shards", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 2).await;
    let second = start_with("counter", &stream.name, &application, "worker-1", &[]);
    let (status, log) = second.wait_exit(LIMIT).await;
    let text = log.join("\n");
    assert!(!status.success(), "{text}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(text.contains("worker id `worker-1` is in use by a live process") && text.contains(host.trim()), "names the id and the host: {text}");
    assert_eq!(count_lines(&log, "kcl_host::guest: initialize "), 0, "it processed nothing: {text}");
    // The first goes on as if nothing happened: its row and leases are its own.
    let after = one_each(&stream, &shards, "after").await;
    first.wait_for("the new records", LIMIT, |log| processed(log, &after)).await;
    let (status, log) = first.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    assert!(leases(&aws.dynamodb, &application).await.iter().all(|l| l.owner.is_none()), "the first gave its leases back at its stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_shard_is_read_at_most_three_times_a_second_and_throttling_backs_off() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("pacing"), 1).await;
    let shard = stream.shards().await[0].id.clone();
    let proxy = FaultProxy::start(&upstream("KINESIS")).await;
    // Ten records a call: a backlog of 300 takes 30 calls, as fast as the reader allows.
    let records = payloads("busy", 300);
    stream.put(&shard, &records).await;
    proxy.set(vec![Rule {
        table: None,
        operation: Some("GetRecords"),
        body_contains: None,
        fault: Fault::Fail(400, "ProvisionedThroughputExceededException"),
        times: Some(2),
    }]);
    let mut host = start_through(&proxy, "KINESIS", "counter", &stream.name, &unique("pacing-app"), "worker-1", &["--max-records", "10"]);
    host.wait_for("the backlog", LIMIT, |log| processed(log, &records)).await;
    let (status, log) = host.interrupt().await;
    assert!(status.success(), "{}", log.join("\n"));
    let calls: Vec<_> = proxy.counts().requests.into_iter().filter(|r| r.operation == "GetRecords").collect();
    assert!(calls.len() >= 30, "{} calls", calls.len());
    for (i, call) in calls.iter().enumerate() {
        let in_a_second = calls[i..].iter().take_while(|c| c.at.duration_since(call.at) < Duration::from_secs(1)).count();
        assert!(in_a_second <= 3, "{in_a_second} GetRecords calls within a second of call {i}: room is left for a second reader");
    }
    for pair in calls.windows(2).filter(|pair| pair[0].faulted) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(gap >= Duration::from_secs(1), "a throttled call is followed by another after {gap:?}, not 1 s or more");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_under_a_worker_stops_it_with_the_reason() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("deleted"), 1).await;
    let mut host = start_with("counter", &stream.name, &unique("deleted-app"), "worker-1", &[]);
    host.wait_for("the shard", LIMIT, |log| count_lines(log, "kcl_host::guest: initialize ") >= 1).await;
    aws.kinesis.delete_stream().stream_name(&stream.name).send().await.unwrap();
    let (status, log) = host.wait_exit(LIMIT).await;
    assert!(!status.success(), "{}", log.join("\n"));
    let said = format!("Kinesis stream `{}` no longer exists (it was deleted while this worker read it)", stream.name);
    assert!(log.iter().any(|l| l.contains(&said)), "{}", log.join("\n"));
}
