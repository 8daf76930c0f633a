//! The KCL mapping over real registries: names, dimensions, levels, merges.

use super::*;
use crate::metrics::snapshot;
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;

fn all(stream_ids: &[(&str, &str)]) -> Selection {
    let stream_ids = stream_ids.iter().map(|(name, id)| (name.to_string(), id.to_string())).collect();
    Selection { level: Level::Detailed, dimensions: DIMENSIONS.iter().map(|d| d.to_string()).collect(), stream_ids }
}

fn find<'a>(data: &'a [Datum], name: &str, operation: &str) -> Vec<&'a Datum> {
    data.iter().filter(|d| d.name == name && d.dimensions[0].1 == operation).collect()
}

#[test]
fn a_minute_of_a_shard_in_kcl_names_with_its_dimensions() {
    let metrics = Arc::new(Metrics::new("orders-app", "w1"));
    let (before, _) = snapshot::read(&metrics.encode());
    let shard = metrics.shard("orders", &"shardId-000000000001".into());
    shard.processed(30, 3000, Duration::from_millis(20));
    shard.processed(10, 1000, Duration::from_millis(5));
    shard.millis_behind_latest(1500);
    metrics.leases_held(1);
    let (now, kinds) = snapshot::read(&metrics.encode());
    let data = data(&before, &now, &kinds, &all(&[]));
    let dims = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    let records = find(&data, "RecordsProcessed", "ProcessTask");
    assert_eq!(records.len(), 1, "{data:?}");
    assert_eq!(records[0].dimensions, dims(&[("Operation", "ProcessTask"), ("ShardId", "shardId-000000000001")]));
    assert_eq!((records[0].stats.sum, records[0].unit), (40.0, Unit::Count));
    assert_eq!(find(&data, "DataBytesProcessed", "ProcessTask")[0].stats.sum, 4000.0);
    let time = find(&data, "RecordProcessor.processRecords.Time", "ProcessTask")[0].stats;
    assert_eq!(time.count, 2.0);
    assert!((time.sum - 25.0).abs() < 1e-6 && time.min <= 5.0 && time.max >= 20.0 && time.max <= 40.0, "{time:?}");
    assert_eq!(find(&data, "MillisBehindLatest", "ApplicationTracker")[0].dimensions, dims(&[("Operation", "ApplicationTracker")]));
    let leases = find(&data, "CurrentLeases", "RenewAllLeases");
    assert_eq!(leases[0].dimensions, dims(&[("Operation", "RenewAllLeases"), ("WorkerIdentifier", "w1")]));
    assert!(find(&data, "LostLeases", "RenewAllLeases").is_empty(), "a zero that costs a metric a month: {data:?}");
    assert!(data.iter().all(|d| d.name != "ProcessorVersion" && d.name != "BatchesProcessed"), "{data:?}");

    // The next interval publishes what changed since this one.
    shard.processed(5, 50, Duration::from_millis(1));
    let (later, kinds) = snapshot::read(&metrics.encode());
    let next = super::data(&now, &later, &kinds, &all(&[]));
    assert_eq!(find(&next, "RecordsProcessed", "ProcessTask")[0].stats.sum, 5.0);
    assert_eq!(find(&next, "RecordProcessor.processRecords.Time", "ProcessTask")[0].stats.count, 1.0);
}

const MULTI: [(&str, &str); 2] = [("a", "123456789012:a:1700000000"), ("b", "123456789012:b:1700000000")];

#[test]
fn levels_and_dimensions_filter_and_merge_as_kcls_do() {
    let metrics = Arc::new(Metrics::new("app", "w1"));
    for (stream, shard) in [("a", "shardId-0"), ("b", "shardId-0"), ("b", "shardId-1")] {
        let shard = metrics.shard(stream, &shard.into());
        shard.processed(1, 10, Duration::from_millis(1));
        shard.failure_events("dead-letter", 2);
        shard.failure_event("retry");
    }
    let (now, kinds) = snapshot::read(&metrics.encode());
    let several = data(&Series::new(), &now, &kinds, &all(&MULTI));
    let records = find(&several, "RecordsProcessed", "ProcessTask");
    assert_eq!(records.len(), 3, "one per stream and shard: {several:?}");
    assert!(records.iter().all(|d| d.dimensions.iter().map(|(k, _)| k.as_str()).eq(["Operation", "StreamId", "ShardId"])));
    assert!(records.iter().any(|d| d.dimensions[1].1 == "123456789012:b:1700000000"), "Java KCL's StreamId: {records:?}");
    assert_eq!(find(&several, "DeadLetterRecords", "ProcessTask").iter().map(|d| d.stats.sum).sum::<f64>(), 6.0);

    let operation_only = Selection { dimensions: vec![], ..all(&MULTI) };
    let merged = data(&Series::new(), &now, &kinds, &operation_only);
    let records = find(&merged, "RecordsProcessed", "ProcessTask");
    assert_eq!(records.len(), 1, "{merged:?}");
    assert_eq!((records[0].stats.sum, records[0].stats.count), (3.0, 3.0));

    let summary = data(&Series::new(), &now, &kinds, &Selection { level: Level::Summary, ..all(&MULTI) });
    assert!(find(&summary, "RetriedCalls", "ProcessTask").is_empty() && !find(&summary, "DeadLetterRecords", "ProcessTask").is_empty());
}

#[test]
fn a_family_without_a_rule_still_reaches_cloudwatch() {
    let mut kinds = BTreeMap::new();
    kinds.insert("widgets_polished".to_owned(), Kind::Counter);
    let labels: Labels = [("worker".to_owned(), "w1".to_owned())].into();
    let now: Series = [(("widgets_polished".to_owned(), labels), Value::Number(4.0))].into();
    let data = data(&Series::new(), &now, &kinds, &all(&[]));
    assert_eq!(data.len(), 1);
    assert_eq!((data[0].name.as_str(), data[0].dimensions[0].1.as_str(), data[0].stats.sum), ("WidgetsPolished", "KclHost", 4.0));
}
