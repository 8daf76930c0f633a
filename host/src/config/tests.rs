//! The settings' resolution: layers, defaults and the errors that name the fix.

use super::*;
use super::values::stream_name;
use std::path::Path;
use crate::output::TargetSpec;
use crate::metrics::kcl::Level;
use crate::metrics::publish::SinkKind;

#[test]
fn a_stream_is_given_by_name_or_by_arn() {
    assert_eq!(stream_name("orders").unwrap().0, "orders");
    assert_eq!(stream_name("arn:aws:kinesis:us-east-2:123456789012:stream/orders").unwrap().0, "orders");
    for bad in ["arn:aws:kinesis:us-east-2:123456789012:orders", "arn:aws:sqs:us-east-2:123456789012:stream/orders", "arn:aws:kinesis"] {
        let refused = stream_name(bad).unwrap_err().to_string();
        assert!(refused.starts_with("`stream` = ") && refused.contains("stream/<name>"), "{refused}");
    }
}

#[test]
fn the_file_holds_the_swap_settings_too() {
    let file: Layer = toml::from_str("watch = true\nswap_canary_input = \"sample.jsonl\"").unwrap();
    let c = WorkerConfig::resolve(layer().over(file)).unwrap();
    assert!(c.watch);
    assert_eq!(c.swap_canary_input.as_deref(), Some(Path::new("sample.jsonl")));
    assert!(!WorkerConfig::resolve(layer()).unwrap().watch);
}

fn layer() -> Layer {
    Layer { stream: Some("s".into()), application: Some("app".into()), ..Default::default() }
}

#[test]
fn defaults_follow_the_kcl() {
    let c = WorkerConfig::resolve(layer()).unwrap();
    assert_eq!(c.streams, [StreamSpec { name: "s".into(), initial_position: crate::shard::InitialPosition::TrimHorizon, kind: crate::stream::StreamKind::Kinesis }]);
    assert_eq!(c.take.failover_time, Duration::from_secs(10));
    assert_eq!(c.take.max_leases_to_steal, 1);
    assert_eq!(c.shard_sync_interval, Duration::from_secs(60));
    assert_eq!(c.fetch.max_records, 10_000);
}

#[test]
fn metrics_settings_follow_the_kcls_names_in_the_file_too() {
    let file: Layer = toml::from_str("metrics = [\"emf\"]\nmetrics_level = \"summary\"\nmetrics_dimensions = [\"WorkerIdentifier\"]\nmetrics_buffer_time = \"10s\"").unwrap();
    let c = WorkerConfig::resolve(layer().over(file)).unwrap().metrics;
    assert_eq!((c.sinks, c.selection.level, c.selection.dimensions, c.interval), (vec![SinkKind::Emf], Level::Summary, vec!["WorkerIdentifier".to_owned()], Duration::from_secs(10)));
    let defaults = WorkerConfig::resolve(layer()).unwrap().metrics;
    assert!(defaults.sinks.is_empty() && defaults.selection.level == Level::Detailed && defaults.interval == Duration::from_secs(60));
}

#[test]
fn flags_win_over_the_file() {
    let flags = Layer { failover_time: Some("3s".into()), ..layer() };
    let file: Layer = toml::from_str("failover_time = \"20s\"\nmax_leases = 4\nstream = \"other\"").unwrap();
    let c = WorkerConfig::resolve(flags.over(file)).unwrap();
    assert_eq!((c.streams[0].name.as_str(), c.take.failover_time, c.take.max_leases), ("s", Duration::from_secs(3), 4));
    let listed = WorkerConfig::resolve(layer().over(toml::from_str("streams = [\"a\", \"b\"]").unwrap())).unwrap();
    assert_eq!(listed.streams.len(), 1, "the flag's single stream wins over the file's list");
}

#[test]
fn bad_settings_are_named_with_the_fix() {
    let cases = [
        (Layer { stream: None, ..layer() }, "--stream"),
        (Layer { initial_position: Some("OLDEST".into()), ..layer() }, "TRIM_HORIZON, LATEST or AT_TIMESTAMP"),
        (Layer { initial_position: Some("AT_TIMESTAMP".into()), ..layer() }, "initial_timestamp"),
        (Layer { failover_time: Some("ten".into()), ..layer() }, "10s"),
        (Layer { max_records: Some(20_000), ..layer() }, "1 to 10000"),
        (Layer { parallelism: Some(0), ..layer() }, "1 to 64 instances"),
        (Layer { parallelism: Some(65), ..layer() }, "1 to 64 instances"),
        (Layer { parallelism: Some(8), max_instances: Some(4), ..layer() }, "max_instances (4)"),
        (Layer { max_leases: Some(0), ..layer() }, "at least 1"),
        (Layer { failover_time: Some("1500".into()), ..layer() }, "with a unit"),
        (Layer { failover_time: Some("0s".into()), ..layer() }, "longer than zero"),
        (Layer { shard_sync_interval: Some("999999999999999999999m".into()), ..layer() }, "with a unit"),
        (Layer { shard_sync_interval: Some("48h".into()), ..layer() }, "at most 24h"),
        (Layer { call_deadline: Some("0ms".into()), ..layer() }, "longer than zero"),
        (Layer { memory_limit_mib: Some(0), ..layer() }, "at least 1"),
        (Layer { metrics_level: Some("LOUD".into()), ..layer() }, "NONE, SUMMARY or DETAILED"),
        (Layer { metrics_dimensions: Some(vec!["Shard".into()]), ..layer() }, "ShardId, StreamId or WorkerIdentifier"),
        (Layer { metrics: Some(vec!["statsd".into()]), ..layer() }, "cloudwatch or emf"),
    ];
    for (layer, words) in cases {
        let err = WorkerConfig::resolve(layer).unwrap_err().to_string();
        assert!(err.contains(words), "{err:?} should mention {words:?}");
    }
}

#[test]
fn parallelism_reads_n_calls_worth_and_counts_n_instances_per_lease() {
    let file: Layer = toml::from_str("parallelism = 8\nmax_records = 100\nmax_instances = 20").unwrap();
    let c = WorkerConfig::resolve(layer().over(file)).unwrap();
    assert_eq!((c.parallelism, c.fetch.max_records, c.fetch_limit(), c.take.max_leases), (8, 100, 800, 2));
    let c = WorkerConfig::resolve(Layer { parallelism: Some(64), ..layer() }).unwrap();
    assert_eq!(c.fetch_limit(), 10_000, "GetRecords gives at most 10,000");
}

#[test]
fn sandbox_settings_have_file_keys_and_cap_the_leases() {
    let file: Layer = toml::from_str(
        "memory_limit_mib = 64\ncall_deadline = \"5s\"\nmax_instances = 8\ncache_dir = \"/tmp/c\"\nno_cache = true",
    )
    .unwrap();
    let c = WorkerConfig::resolve(layer().over(file)).unwrap();
    assert_eq!(c.runtime.memory_limit, 64 << 20);
    assert_eq!(c.runtime.call_deadline, Duration::from_secs(5));
    assert_eq!(c.runtime.max_instances, 8);
    assert_eq!(c.runtime.cache_dir, None, "no_cache wins over cache_dir");
    assert_eq!(c.take.max_leases, 8, "no more leases than instances");
}

#[test]
fn swap_settings_have_file_keys() {
    let file: Layer = toml::from_str("swap_canary_batches = 0\nswap_rollback_after = 5\nswap_buffer_mib = 16").unwrap();
    let swap = WorkerConfig::resolve(layer().over(file)).unwrap().swap;
    assert_eq!((swap.canary_batches, swap.rollback_after, swap.buffer_bytes), (0, 5, 16 << 20));
    assert_eq!(WorkerConfig::resolve(layer()).unwrap().swap.buffer_bytes, 256 << 20);
}

#[test]
fn the_failure_policy_has_lambdas_bounds_and_names_a_target_by_uri_or_output() {
    let failure = |toml_text: &str| WorkerConfig::resolve(layer().over(toml::from_str(toml_text).unwrap())).map(|c| c.failure);
    let default = failure("").unwrap();
    assert_eq!(default, FailureSettings::default());
    assert_eq!((default.max_retry_attempts, default.max_record_age, default.bisect_on_error, default.on_failure.as_ref()), (None, None, false, None));
    assert!(default.drop_warning().is_none(), "the default drops nothing");
    let set = failure("max_retry_attempts = 2\nmax_record_age = \"1h\"\nbisect_on_error = true\non_failure = \"dlq\"\n[outputs]\ndlq = \"kinesis:orders-dlq\"").unwrap();
    assert_eq!((set.max_retry_attempts, set.max_record_age), (Some(2), Some(Duration::from_secs(3600))));
    assert_eq!(set.on_failure, Some(TargetSpec::Kinesis("orders-dlq".into())), "an output's name stands for its target");
    assert_eq!(failure("max_retry_attempts = -1").unwrap().max_retry_attempts, None, "Lambda's -1");
    assert!(failure("max_retry_attempts = 1").unwrap().drop_warning().unwrap().contains("SKIPPED"), "a limit without a target drops records: said at start");
    for (bad, words) in [
        ("max_retry_attempts = 10001", "0 to 10000, or -1"),
        ("max_record_age = \"200h\"", "1s to 168h"),
        ("on_failure = \"s3:bucket\"", "or the name of an --output"),
    ] {
        let err = failure(bad).unwrap_err().to_string();
        assert!(err.contains(words), "{bad}: {err}");
    }
}

#[test]
fn unknown_file_keys_are_refused() {
    let err = toml::from_str::<Layer>("failover = \"1s\"").unwrap_err().to_string();
    assert!(err.contains("unknown field `failover`"), "{err}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("1500"), None, "a bare number has no unit");
    assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
    assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
    assert_eq!(parse_duration("2d"), None);
    assert_eq!(parse_duration("18446744073709551615m"), None, "overflow is refused, not a panic");
}
