//! The policy on made-up batches and errors.

use super::*;
use crate::records::Record;

const BACKOFF: Duration = Duration::from_millis(100);

fn settings(max: Option<u32>, bisect: bool) -> FailureSettings {
    FailureSettings { max_retry_attempts: max, bisect_on_error: bisect, retry_backoff: BACKOFF, ..FailureSettings::default() }
}

/// Records with sequence numbers `from..to`, arrived at `arrival` ms.
fn batch(from: u32, to: u32) -> Batch {
    let seqs: Vec<String> = (from..to).map(|n| n.to_string()).collect();
    seqs.iter()
        .map(|seq| Record { data: b"", partition_key: "k", sequence_number: seq, sub_sequence_number: None, arrival_timestamp_ms: 1_000, explicit_hash_key: None })
        .collect()
}

fn trap() -> CallError {
    CallError::Trap("boom".into())
}

/// Runs the policy over `batch` with a processor that fails `calls`
/// on any slice holding `poison`; returns the give-ups and the calls made.
fn isolate(policy: &mut FailurePolicy, batch: &Batch, poison: &str) -> (Vec<String>, usize) {
    let (mut from, mut calls, mut given_up) = (0, 0, Vec::new());
    while from < batch.len() {
        let n = policy.next_slice(batch, from);
        let head = batch.slice(from, n);
        calls += 1;
        if !head.iter().any(|r| r.sequence_number == poison) {
            policy.succeeded(&head);
            from += n;
            continue;
        }
        match policy.failed(&head, &trap(), "v1").step {
            Step::GiveUp { records, .. } => {
                given_up.extend(head.iter().take(records).map(|r| r.sequence_number.to_owned()));
                from += records;
            }
            Step::Retry { restart, .. } => assert!(restart, "a trap ends the instance"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(calls < 100, "no end");
    }
    (given_up, calls)
}

#[test]
fn bisect_isolates_one_poison_record_in_a_batch_of_500_and_gives_up_on_it_alone() {
    let mut policy = FailurePolicy::new(&settings(Some(2), true));
    let (given_up, calls) = isolate(&mut policy, &batch(1000, 1500), "1321");
    assert_eq!(given_up, ["1321"]);
    // 9 halvings, 3 tries of the record alone, the halves that pass: far fewer than 500.
    assert!(calls < 30, "{calls} calls");
    assert_eq!(policy.retrying(), None, "nothing failing once it is given up");
}

#[test]
fn without_bisect_the_whole_batch_is_given_up_after_its_attempts() {
    let mut policy = FailurePolicy::new(&settings(Some(2), false));
    let (given_up, calls) = isolate(&mut policy, &batch(10, 20), "15");
    assert_eq!(given_up.len(), 10, "Lambda's behaviour: the batch as a whole");
    assert_eq!(calls, 3, "one call and two retries");
}

#[test]
fn unlimited_retries_never_give_up_and_back_off_to_the_cap() {
    let mut policy = FailurePolicy::new(&settings(None, false));
    let head = batch(1, 4);
    let waits: Vec<Duration> = (0..12)
        .map(|_| match policy.failed(&head, &CallError::Retryable("later".into()), "v1").step {
            Step::Retry { wait, restart: false, .. } => wait,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(waits[0], BACKOFF);
    assert_eq!(waits[1], BACKOFF * 2);
    assert_eq!(*waits.last().unwrap(), BACKOFF_CAP);
    let retrying = policy.retrying().unwrap();
    assert_eq!((retrying.attempts, retrying.limit), (12, None));
    assert!(retrying.last_error.contains("later"));
}

#[test]
fn a_partial_failure_checkpoints_what_came_before_and_pins_the_record() {
    let mut policy = FailurePolicy::new(&settings(Some(1), false));
    let head = batch(1, 11);
    let failed_at = |i| CallError::FailedAt { index: i, reason: "bad".into() };
    assert_eq!(policy.failed(&head, &failed_at(4), "v1").step, Step::Partial { done: 4, wait: BACKOFF });
    // Delivered again from record 4: that record alone.
    assert_eq!(policy.next_slice(&head, 4), 1);
    let alone = head.slice(4, 1);
    let step = policy.failed(&alone, &failed_at(0), "v1").step;
    assert_eq!(step, Step::GiveUp { records: 1, condition: Condition::RetryAttemptsExhausted, attempts: 2 });
    assert_eq!(policy.next_slice(&head, 5), 5, "the rest as one batch");
}

#[test]
fn records_before_a_failing_range_come_on_their_own_after_a_restart() {
    let mut policy = FailurePolicy::new(&settings(None, false));
    policy.failed(&batch(5, 9), &trap(), "v1");
    // Read again from an earlier checkpoint, in one batch: 1..5 first, then the range.
    let again = batch(1, 12);
    assert_eq!(policy.next_slice(&again, 0), 4);
    assert_eq!(policy.next_slice(&again, 4), 4);
    policy.succeeded(&again.slice(4, 4));
    assert_eq!(policy.next_slice(&again, 8), 3);
}

#[test]
fn a_failure_on_records_another_version_failed_on_is_not_the_new_versions_fault() {
    let mut policy = FailurePolicy::new(&settings(None, false));
    let head = batch(1, 3);
    assert!(policy.failed(&head, &trap(), "settled").blame_version, "a new failure counts");
    assert!(!policy.failed(&head, &trap(), "candidate").blame_version, "it failed on the settled version too");
    assert!(!policy.failed(&head, &CallError::Retryable("x".into()), "other").blame_version, "a retryable error never counts");
}

#[test]
fn outputs_and_lost_leases_are_never_counted() {
    let mut policy = FailurePolicy::new(&settings(Some(0), false));
    let head = batch(1, 3);
    for _ in 0..5 {
        let verdict = policy.failed(&head, &CallError::OutputsUnwritten("503".into()), "v1");
        assert!(matches!(verdict.step, Step::Retry { restart: false, .. }));
    }
    assert_eq!(policy.failed(&head, &CallError::Withdrawn, "v1").step, Step::LeaseLost);
    assert_eq!(policy.retrying(), None);
}

#[test]
fn records_past_the_age_limit_are_counted_from_the_front() {
    let policy = FailurePolicy::new(&FailureSettings { max_record_age: Some(Duration::from_secs(60)), ..FailureSettings::default() });
    let mut records = batch(1, 5);
    records.arrival_timestamps_ms = vec![0, 1_000, 100_000, 1_000];
    assert_eq!(policy.too_old(&records, 0, 100_000), 2);
    assert_eq!(policy.too_old(&records, 2, 100_000), 0);
}

#[tokio::test(start_paused = true)]
async fn restarts_outside_a_batch_back_off_and_start_over_after_a_healthy_instance() {
    let mut policy = FailurePolicy::new(&settings(None, false));
    let waits: Vec<Duration> = (0..12)
        .map(|_| {
            policy.instance_started();
            policy.restart_wait()
        })
        .collect();
    assert_eq!(waits[0], BACKOFF);
    assert_eq!(*waits.last().unwrap(), BACKOFF_CAP, "capped");
    policy.instance_started();
    tokio::time::advance(HEALTHY).await;
    assert_eq!(policy.restart_wait(), BACKOFF, "a healthy instance resets it");
}

#[test]
fn splits_come_at_once_and_the_rest_of_the_batch_comes_in_one_call_after_a_give_up() {
    let mut policy = FailurePolicy::new(&settings(Some(2), true));
    let batch = batch(1000, 1500);
    let (mut from, mut slices) = (0, Vec::new());
    while from < batch.len() {
        let n = policy.next_slice(&batch, from);
        let head = batch.slice(from, n);
        slices.push(n);
        if !head.iter().any(|r| r.sequence_number == "1321") {
            policy.succeeded(&head);
            from += n;
            continue;
        }
        match policy.failed(&head, &trap(), "v1").step {
            Step::GiveUp { records, .. } => from += records,
            Step::Retry { wait, bisected: true, .. } => assert_eq!(wait, Duration::ZERO, "a split is not an attempt"),
            Step::Retry { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(slices.last(), Some(&(1499 - 1321)), "every record after the poison one, in one call: {slices:?}");
    assert_eq!(policy.restart_wait(), Duration::ZERO, "the instance after the give-up starts at once");
}
