//! `kcl-host iam-policy`: the least-privilege IAM policy a worker needs for
//! exactly the settings it runs with — the same flags, variables and config
//! file as `kcl-host run`.
//!
//! Each statement names one resource and the actions the worker calls on
//! it, as AWS authorizes them: a `TransactWriteItems` needs the item
//! actions it carries (`PutItem`, `UpdateItem`, `DeleteItem`,
//! `ConditionCheckItem`) on each table it writes, and a `SubscribeToShard`
//! needs the consumer, not the stream. The acceptance test runs workers
//! behind the fault proxy and checks every request against the policy.

use serde::Serialize;

use crate::cli::IamPolicyArgs;
use crate::config::{Retrieval, WorkerConfig};
use crate::lease::heartbeat::control_table_name;
use crate::metrics::progress::progress_table_name;
use crate::metrics::kcl::Level;
use crate::metrics::publish::SinkKind;
use crate::output::TargetSpec;
use crate::state::state_table_name;
use crate::stream::{StreamKind, StreamSpec};
use crate::swap::store::components_table_name;

/// Where the ARNs point: `*` where a part is not known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// `aws`, `aws-cn` or `aws-us-gov`, from the region.
    pub partition: String,
    /// The region the worker runs in.
    pub region: String,
    /// The 12-digit account id.
    pub id: String,
}

impl Account {
    /// The account `id` in `region` (`*` for any), in the partition the
    /// region belongs to.
    pub fn new(region: Option<&str>, id: Option<&str>) -> Self {
        let region = region.unwrap_or("*").to_owned();
        let partition = if region.starts_with("cn-") {
            "aws-cn"
        } else if region.starts_with("us-gov-") {
            "aws-us-gov"
        } else {
            "aws"
        };
        Self { partition: partition.into(), region, id: id.unwrap_or("*").to_owned() }
    }

    fn stream(&self, name: &str) -> String {
        // An output may name a stream of another account or region by its ARN.
        if name.starts_with("arn:") {
            return name.to_owned();
        }
        format!("arn:{}:kinesis:{}:{}:stream/{name}", self.partition, self.region, self.id)
    }

    fn table(&self, name: &str) -> String {
        format!("arn:{}:dynamodb:{}:{}:table/{name}", self.partition, self.region, self.id)
    }
}

/// An IAM policy document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Policy {
    version: &'static str,
    statement: Vec<Statement>,
}

/// One `Allow` of some actions on some resources.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Statement {
    sid: String,
    effect: &'static str,
    action: Vec<&'static str>,
    resource: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    condition: Option<serde_json::Value>,
}

impl Statement {
    fn allow(sid: &str, action: &[&'static str], resource: Vec<String>) -> Self {
        Self { sid: sid.into(), effect: "Allow", action: action.to_vec(), resource, condition: None }
    }
}

/// What a worker does on the streams it reads, by `GetRecords`.
const POLLING: &[&str] = &["kinesis:DescribeStreamSummary", "kinesis:ListShards", "kinesis:GetShardIterator", "kinesis:GetRecords"];
/// What a worker does on the DynamoDB stream it reads.
const DYNAMODB_STREAM: &[&str] = &["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"];
/// With `--dynamodb-table`: finding the table's current stream (an action on no resource).
const LIST_STREAMS: &[&str] = &["dynamodb:ListStreams"];
/// What a worker does on the streams it reads with enhanced fan-out: it
/// registers the application's consumer on the stream.
const FAN_OUT_STREAM: &[&str] = &["kinesis:DescribeStreamSummary", "kinesis:ListShards", "kinesis:RegisterStreamConsumer"];
/// ... and reads through that consumer.
const FAN_OUT_CONSUMER: &[&str] = &["kinesis:DescribeStreamConsumer", "kinesis:SubscribeToShard"];
/// An output or failure target stream: checked at start, then written.
const KINESIS_TARGET: &[&str] = &["kinesis:DescribeStreamSummary", "kinesis:PutRecords"];
/// An output or failure target table: checked at start, then written.
const DYNAMODB_TARGET: &[&str] = &["dynamodb:DescribeTable", "dynamodb:BatchWriteItem"];
/// The lease table: made if missing, scanned, each lease written (and a
/// checkpoint's transaction, or its condition check, fences by the row).
const LEASE_TABLE: &[&str] = &[
    "dynamodb:DescribeTable",
    "dynamodb:CreateTable",
    "dynamodb:Scan",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
];
/// The control table: each worker's heartbeat row (updated) and progress
/// row (put), the deploy row (read alone once at start).
const CONTROL_TABLE: &[&str] =
    &["dynamodb:DescribeTable", "dynamodb:CreateTable", "dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"];
/// The progress table, made on first use: each worker's progress row put
/// and deleted; `status` and the dashboard scan it.
const PROGRESS_TABLE: &[&str] = &["dynamodb:DescribeTable", "dynamodb:CreateTable", "dynamodb:Scan", "dynamodb:PutItem", "dynamodb:DeleteItem"];
/// The state table, made on the first use of state or windows: read in
/// batches, written with the checkpoints, a large commit's redo log put
/// and deleted. Always granted: a version deployed later may use state.
const STATE_TABLE: &[&str] = &[
    "dynamodb:DescribeTable",
    "dynamodb:CreateTable",
    "dynamodb:BatchGetItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
];
/// The components table, read when `kcl-host deploy` names a version.
const COMPONENTS_TABLE: &[&str] = &["dynamodb:GetItem"];

/// Prints the policy for `kcl-host iam-policy`'s arguments on stdout; on
/// stderr, what the ARNs leave open.
pub fn command(args: &IamPolicyArgs) -> Result<(), String> {
    let config = args.run.worker_config()?;
    // The region as `run` finds it, short of reading the profile.
    let region = config.aws.region.clone().or_else(|| ["AWS_REGION", "AWS_DEFAULT_REGION"].iter().find_map(|v| std::env::var(v).ok()));
    if region.is_none() {
        eprintln!("note: no region (--region, AWS_REGION): the ARNs match every region");
    }
    if args.account_id.is_none() {
        eprintln!("note: no --account-id: the ARNs match every account");
    }
    let policy = worker_policy(&config, &Account::new(region.as_deref(), args.account_id.as_deref()));
    println!("{}", serde_json::to_string_pretty(&policy).expect("a policy serializes"));
    Ok(())
}

/// The policy a worker with `config` needs in `account`.
pub fn worker_policy(config: &WorkerConfig, account: &Account) -> Policy {
    let mut statement = read_streams(config, account);
    let targets: Vec<&TargetSpec> = config.outputs.iter().map(|o| &o.target).chain(config.failure.on_failure.as_ref()).collect();
    let target_streams = dedup(targets.iter().filter_map(|t| match t {
        TargetSpec::Kinesis(stream) => Some(account.stream(stream)),
        _ => None,
    }));
    if !target_streams.is_empty() {
        statement.push(Statement::allow("WriteTargetStreams", KINESIS_TARGET, target_streams));
    }
    let target_tables = dedup(targets.iter().filter_map(|t| match t {
        TargetSpec::DynamoDb(table) => Some(account.table(table)),
        _ => None,
    }));
    if !target_tables.is_empty() {
        statement.push(Statement::allow("WriteTargetTables", DYNAMODB_TARGET, target_tables));
    }
    let application = &config.application;
    for (sid, actions, table) in [
        ("LeaseTable", LEASE_TABLE, application.clone()),
        ("ControlTable", CONTROL_TABLE, control_table_name(application)),
        ("ProgressTable", PROGRESS_TABLE, progress_table_name(application)),
        ("StateTable", STATE_TABLE, state_table_name(application)),
        ("ComponentsTable", COMPONENTS_TABLE, components_table_name(application)),
    ] {
        statement.push(Statement::allow(sid, actions, vec![account.table(&table)]));
    }
    if config.metrics.sinks.contains(&SinkKind::CloudWatch) && config.metrics.selection.level != Level::None {
        // PutMetricData has no resource to name: the namespace condition narrows it.
        statement.push(Statement {
            condition: Some(serde_json::json!({ "StringEquals": { "cloudwatch:namespace": application } })),
            ..Statement::allow("PublishMetrics", &["cloudwatch:PutMetricData"], vec!["*".into()])
        });
    }
    Policy { version: "2012-10-17", statement }
}

/// What reading the configured streams takes: Kinesis (polling or fan-out),
/// or one DynamoDB stream (a DynamoDB stream is read alone).
fn read_streams(config: &WorkerConfig, account: &Account) -> Vec<Statement> {
    let dynamodb = |spec: &StreamSpec| match spec.kind {
        StreamKind::Kinesis => None,
        StreamKind::DynamoDbStream => Some(vec![Statement::allow("ReadTableStream", DYNAMODB_STREAM, vec![spec.name.clone()])]),
        StreamKind::DynamoDbTable => Some(vec![
            Statement::allow("ReadTableStream", DYNAMODB_STREAM, vec![format!("{}/stream/*", account.table(&spec.name))]),
            Statement::allow("FindTableStream", LIST_STREAMS, vec!["*".into()]),
        ]),
    };
    if let Some(statements) = config.streams.iter().find_map(dynamodb) {
        return statements;
    }
    let streams: Vec<String> = config.streams.iter().map(|s| account.stream(&s.name)).collect();
    match config.retrieval {
        Retrieval::Polling => vec![Statement::allow("ReadStreams", POLLING, streams)],
        Retrieval::FanOut => {
            let consumers = streams.iter().map(|s| format!("{s}/consumer/{}:*", config.application)).collect();
            vec![Statement::allow("ReadStreams", FAN_OUT_STREAM, streams), Statement::allow("ReadThroughConsumer", FAN_OUT_CONSUMER, consumers)]
        }
    }
}

/// `arns` in order, each once.
fn dedup(arns: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = Vec::new();
    for arn in arns {
        if !seen.contains(&arn) {
            seen.push(arn);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Layer;

    fn config(layer: Layer) -> WorkerConfig {
        WorkerConfig::resolve(Layer { application: Some("orders-totals".into()), ..layer }).unwrap()
    }

    fn policy(layer: Layer) -> serde_json::Value {
        serde_json::to_value(worker_policy(&config(layer), &Account::new(Some("eu-west-1"), Some("123456789012")))).unwrap()
    }

    fn statement<'a>(policy: &'a serde_json::Value, sid: &str) -> Option<&'a serde_json::Value> {
        policy["Statement"].as_array().unwrap().iter().find(|s| s["Sid"] == sid)
    }

    #[test]
    fn a_dynamodb_stream_is_read_by_its_arn_or_by_the_tables_streams() {
        let arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-12-01T00:00:00.000";
        let by_arn = policy(Layer { stream: Some(arn.into()), application: Some("orders-cdc".into()), ..Default::default() });
        let read = statement(&by_arn, "ReadTableStream").unwrap();
        assert_eq!(read["Resource"], serde_json::json!([arn]));
        assert!(read["Action"].as_array().unwrap().contains(&"dynamodb:GetRecords".into()));
        assert!(statement(&by_arn, "ReadStreams").is_none() && statement(&by_arn, "FindTableStream").is_none());
        let by_table = policy(Layer { dynamodb_table: Some("orders".into()), application: Some("orders-cdc".into()), ..Default::default() });
        assert_eq!(statement(&by_table, "ReadTableStream").unwrap()["Resource"], serde_json::json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/*"]));
        assert_eq!(statement(&by_table, "FindTableStream").unwrap()["Action"], serde_json::json!(["dynamodb:ListStreams"]));
    }

    #[test]
    fn a_plain_worker_reads_its_stream_and_writes_only_its_own_tables() {
        let policy = policy(Layer { stream: Some("orders".into()), ..Layer::default() });
        let read = statement(&policy, "ReadStreams").unwrap();
        assert_eq!(read["Resource"], serde_json::json!(["arn:aws:kinesis:eu-west-1:123456789012:stream/orders"]));
        assert!(read["Action"].as_array().unwrap().contains(&"kinesis:GetRecords".into()));
        let tables: Vec<&str> = policy["Statement"].as_array().unwrap().iter().flat_map(|s| s["Resource"].as_array().unwrap()).filter_map(|r| r.as_str()?.split("table/").nth(1)).collect();
        assert_eq!(tables, ["orders-totals", "orders-totals-KclHostControl", "orders-totals-KclHostProgress", "orders-totals-KclHostState", "orders-totals-KclHostComponents"]);
        assert!(statement(&policy, "ReadThroughConsumer").is_none() && statement(&policy, "WriteTargetStreams").is_none());
        assert!(!policy.to_string().contains("\"*\""), "no resource is a bare wildcard: {policy}");
    }

    #[test]
    fn fan_out_reads_through_the_applications_consumer_and_polls_nothing() {
        let policy = policy(Layer { stream: Some("orders".into()), retrieval: Some("fanout".into()), ..Layer::default() });
        let consumer = statement(&policy, "ReadThroughConsumer").unwrap();
        assert_eq!(consumer["Resource"], serde_json::json!(["arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/orders-totals:*"]));
        assert!(!statement(&policy, "ReadStreams").unwrap()["Action"].as_array().unwrap().contains(&"kinesis:GetRecords".into()));
    }

    #[test]
    fn outputs_and_the_failure_target_are_granted_once_each_an_arn_kept_as_given() {
        let other = "arn:aws:kinesis:us-east-1:999999999999:stream/shared";
        let outputs = [("a", "kinesis:enriched"), ("b", "dynamodb:totals"), ("c", "https://example.com/in"), ("d", "kinesis:enriched"), ("e", &format!("kinesis:{other}"))];
        let layer = Layer {
            stream: Some("orders".into()),
            outputs: Some(outputs.iter().map(|(n, u)| (n.to_string(), u.to_string())).collect()),
            on_failure: Some("kinesis:dead-letters".into()),
            ..Layer::default()
        };
        let policy = policy(layer);
        let streams = &statement(&policy, "WriteTargetStreams").unwrap()["Resource"];
        assert_eq!(
            streams,
            &serde_json::json!(["arn:aws:kinesis:eu-west-1:123456789012:stream/enriched", other, "arn:aws:kinesis:eu-west-1:123456789012:stream/dead-letters"])
        );
        assert_eq!(statement(&policy, "WriteTargetTables").unwrap()["Resource"], serde_json::json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/totals"]));
    }

    #[test]
    fn cloudwatch_metrics_are_granted_for_the_applications_namespace_only() {
        let emf = policy(Layer { stream: Some("orders".into()), metrics: Some(vec!["emf".into()]), ..Layer::default() });
        assert!(statement(&emf, "PublishMetrics").is_none(), "EMF lines need no API call: {emf}");
        let cloudwatch = policy(Layer { stream: Some("orders".into()), metrics: Some(vec!["cloudwatch".into()]), ..Layer::default() });
        let publish = statement(&cloudwatch, "PublishMetrics").unwrap();
        assert_eq!(publish["Action"], serde_json::json!(["cloudwatch:PutMetricData"]));
        assert_eq!(publish["Condition"], serde_json::json!({ "StringEquals": { "cloudwatch:namespace": "orders-totals" } }));
    }

    #[test]
    fn the_region_names_the_partition_and_what_is_unknown_is_a_wildcard_part() {
        assert_eq!(Account::new(Some("cn-north-1"), None).table("t"), "arn:aws-cn:dynamodb:cn-north-1:*:table/t");
        assert_eq!(Account::new(Some("us-gov-west-1"), Some("1")).stream("s"), "arn:aws-us-gov:kinesis:us-gov-west-1:1:stream/s");
        assert_eq!(Account::new(None, None).stream("s"), "arn:aws:kinesis:*:*:stream/s");
    }
}
