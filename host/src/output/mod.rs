//! Outputs: the targets an operator declared (`--output NAME=URI`), and
//! each shard's queue of what its processor sent to them.
//!
//! One file per role, as in Vector's sinks: [`spec`] (what is declared),
//! [`record`] (a record and its JSON line), [`target`] (what every target
//! does, and retrying), a file per kind of target ([`kinesis`],
//! [`dynamodb`], [`http`], [`file`]), and [`buffer`] (a shard's queue and
//! the worker's byte budget).
//!
//! The delivery contract is kept by the runtime: it flushes a shard's queue
//! before every checkpoint and at the end of every call (see
//! [`crate::runtime::OutputSink`]). Credentials are the host's AWS chain;
//! the guest never sees them.

pub mod buffer;
pub mod dynamodb;
pub mod file;
pub mod http;
pub mod kinesis;
pub mod record;
pub mod spec;
pub mod target;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;

use crate::aws::{AwsClients, AwsError, Service};
use crate::metrics::Metrics;
pub use buffer::ShardOutputs;
use record::OutRecord;
pub use spec::{parse_outputs, OutputSpec, TargetSpec};
use target::Target;

/// A declared target, with what was written to it.
pub(crate) struct Declared {
    name: String,
    target: Box<dyn Target>,
    /// Records acknowledged so far.
    written: AtomicU64,
    metrics: Option<Arc<Metrics>>,
}

impl Declared {
    /// Writes `records`, noting the outcome.
    async fn write(&self, records: &[OutRecord<'_>]) -> Result<(), String> {
        let started = Instant::now();
        let retries = target::Retries::new(0);
        let result = self.target.write(records, &retries).await;
        let bytes = records.iter().map(|r| r.data.len()).sum();
        let retries = retries.into_inner();
        if let Some(metrics) = &self.metrics {
            metrics.output_written(&self.name, records.len(), bytes, retries, result.is_ok(), started.elapsed());
        }
        if result.is_ok() {
            self.written.fetch_add(records.len() as u64, Ordering::Relaxed);
        }
        result.map_err(|e| format!("output `{}`: {e}", self.name))
    }
}

/// Lines `replay --expect` keeps: (target, JSON line), in the order sent.
pub type Recording = Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// `replay`'s target `name`: stdout, or kept in `recording`.
fn lines(name: &str, recording: &Option<Recording>) -> Box<dyn Target> {
    match recording {
        Some(into) => Box::new(file::Lines::Recorded { name: name.to_owned(), into: into.clone() }),
        None => Box::new(file::Lines::Stdout { name: name.to_owned() }),
    }
}

/// A worker's declared outputs and the byte budget their queues share.
pub struct Outputs {
    targets: BTreeMap<String, Arc<Declared>>,
    /// `replay` only: targets made on first use for names nobody declared,
    /// printed on stdout as a declared target's would be (`None`: such a
    /// send is refused). Apart from `targets`, so a send to a declared
    /// target takes no lock.
    undeclared: Option<std::sync::Mutex<BTreeMap<String, Arc<Declared>>>>,
    /// `replay --expect`: every target keeps its lines here instead.
    recording: Option<Recording>,
    budget: Arc<Semaphore>,
    /// The budget, in [`buffer::UNIT`]s.
    budget_units: usize,
    /// The shard queues alive, that share the budget.
    queues: std::sync::atomic::AtomicUsize,
    metrics: Option<Arc<Metrics>>,
}

impl Outputs {
    /// Connects every declared target: a Kinesis stream and a DynamoDB
    /// table must exist (the error names the output and what is missing).
    pub async fn connect(specs: &[OutputSpec], clients: &AwsClients, buffer_bytes: usize, metrics: Option<Arc<Metrics>>) -> Result<Arc<Self>, String> {
        let mut targets: Vec<(String, Box<dyn Target>)> = Vec::new();
        for spec in specs {
            let fail = |e: AwsError| format!("output `{}` ({}): {e}", spec.name, spec.target);
            let target: Box<dyn Target> = match &spec.target {
                TargetSpec::Kinesis(stream) => {
                    let describe = clients.kinesis.describe_stream_summary();
                    let describe = if stream.starts_with("arn:") { describe.stream_arn(stream) } else { describe.stream_name(stream) };
                    describe.send().await.map_err(|e| fail(AwsError::from_sdk(Service::Kinesis, "DescribeStreamSummary", stream, e)))?;
                    Box::new(kinesis::KinesisTarget::new(clients.kinesis.clone(), stream.clone()))
                }
                TargetSpec::DynamoDb(table) => Box::new(dynamodb::DynamoDbTarget::connect(clients.dynamodb.clone(), table.clone()).await.map_err(fail)?),
                TargetSpec::Http(url) => Box::new(http::HttpTarget::new(url.clone())),
                TargetSpec::Stdout => Box::new(file::Lines::Stdout { name: spec.name.clone() }),
                TargetSpec::File(path) => Box::new(file::Lines::File(path.clone())),
            };
            targets.push((spec.name.clone(), target));
        }
        Ok(Arc::new(Self::new(targets, buffer_bytes, metrics)))
    }

    /// For `replay`: no AWS and no network. A file target writes its file;
    /// every other target, and any name the processor sends to that was not
    /// declared, prints its records on stdout as `NAME {json}`. With
    /// `recording`, every target keeps its lines there instead.
    pub fn printed(specs: &[OutputSpec], buffer_bytes: usize, recording: Option<Recording>) -> Arc<Self> {
        let targets = specs
            .iter()
            .map(|spec| {
                let target = match (&spec.target, &recording) {
                    (TargetSpec::File(path), None) => Box::new(file::Lines::File(path.clone())),
                    _ => lines(&spec.name, &recording),
                };
                (spec.name.clone(), target)
            })
            .collect();
        Arc::new(Self { undeclared: Some(Default::default()), recording, ..Self::new(targets, buffer_bytes, None) })
    }

    /// For a swap's canary input: every declared name is taken, nothing is written.
    pub fn discarding(specs: &[OutputSpec]) -> Arc<Self> {
        let targets = specs.iter().map(|spec| (spec.name.clone(), Box::new(file::Lines::Discard) as Box<dyn Target>)).collect();
        Arc::new(Self::new(targets, 64 << 20, None))
    }

    fn new(targets: Vec<(String, Box<dyn Target>)>, buffer_bytes: usize, metrics: Option<Arc<Metrics>>) -> Self {
        let budget_units = (buffer_bytes / buffer::UNIT).clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        let targets = targets
            .into_iter()
            .map(|(name, target)| {
                let declared = Declared { name: name.clone(), target, written: AtomicU64::new(0), metrics: metrics.clone() };
                (name, Arc::new(declared))
            })
            .collect();
        Self { targets, undeclared: None, recording: None, budget: Arc::new(Semaphore::new(budget_units)), budget_units, queues: Default::default(), metrics }
    }

    /// A queue for one shard's instance.
    pub fn shard(self: &Arc<Self>) -> ShardOutputs {
        ShardOutputs::new(self.clone())
    }

    /// Writes `records` to target `name` now, bypassing the queues (each
    /// record checked first): retried within the target's patience.
    pub async fn write_now(&self, name: &str, records: &[OutRecord<'_>]) -> Result<(), String> {
        self.target(name)?.write(records).await
    }

    /// Why target `name` cannot take `record`, if it cannot.
    pub fn check(&self, name: &str, record: &OutRecord<'_>) -> Result<(), String> {
        self.target(name)?.target.check(record)
    }

    /// Records acknowledged so far, per target.
    pub fn written(&self) -> BTreeMap<String, u64> {
        let undeclared = self.undeclared.as_ref().map(|u| u.lock().expect("not poisoned").clone()).unwrap_or_default();
        self.targets.iter().chain(&undeclared).map(|(name, d)| (name.clone(), d.written.load(Ordering::Relaxed))).collect()
    }

    /// Target `name`; the error, for a name nobody declared, says how to
    /// declare it (in `replay`, such a name prints to stdout instead).
    pub(crate) fn target(&self, name: &str) -> Result<Arc<Declared>, String> {
        if let Some(declared) = self.targets.get(name) {
            return Ok(declared.clone());
        }
        let Some(undeclared) = &self.undeclared else { return Err(unknown(&self.targets, name)) };
        let mut undeclared = undeclared.lock().expect("not poisoned");
        let printed = || {
            let target = lines(name, &self.recording);
            Arc::new(Declared { name: name.to_owned(), target, written: AtomicU64::new(0), metrics: None })
        };
        Ok(undeclared.entry(name.to_owned()).or_insert_with(printed).clone())
    }

    fn buffer_changed(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.output_buffer((self.budget_units - self.budget.available_permits()) * buffer::UNIT);
        }
    }
}

/// The message for a send to a target nobody declared, among `declared`.
fn unknown(declared: &BTreeMap<String, Arc<Declared>>, target: &str) -> String {
    if declared.is_empty() {
        return format!("no output target `{target}`: no outputs are declared; declare it with --output {target}=URI");
    }
    let names: Vec<&str> = declared.keys().map(String::as_str).collect();
    format!("no output target `{target}`; the declared ones are {}; declare more with --output NAME=URI", names.join(", "))
}

