//! Publishing the worker's metrics to CloudWatch (`--metrics cloudwatch`,
//! `--metrics emf`): every `--metrics-buffer-time` a task reads the
//! series, turns what changed into KCL metrics ([`super::kcl`]) and hands
//! them to each sink. It runs beside the shards, which only bump counters:
//! a slow, failing or hung CloudWatch delays the next publish, never a
//! shard or a checkpoint.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::cloudwatch::CloudWatch;
use super::emf::Emf;
use super::kcl::{self, Level, Selection};
use super::snapshot::{self, Series};
use super::Metrics;

/// Where metrics go besides Prometheus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkKind {
    /// `PutMetricData` calls.
    CloudWatch,
    /// Embedded Metric Format lines, for the CloudWatch agent or `awslogs`.
    Emf,
}

/// `--metrics`, `--metrics-level`, `--metrics-dimensions`,
/// `--metrics-buffer-time` and `--metrics-emf-file`.
#[derive(Clone, Debug)]
pub struct PublishSettings {
    /// The sinks; none publishes nothing.
    pub sinks: Vec<SinkKind>,
    /// Which metrics, with which dimensions.
    pub selection: Selection,
    /// How often [default: 60 s; KCL's `metricsBufferTimeMillis` is 10 s].
    pub interval: Duration,
    /// Where EMF lines go; stdout when unset.
    pub emf_file: Option<PathBuf>,
}

impl Default for PublishSettings {
    fn default() -> Self {
        PublishSettings {
            sinks: Vec::new(),
            selection: Selection { level: Level::Detailed, dimensions: kcl::DIMENSIONS.iter().map(|d| d.to_string()).collect(), stream_ids: BTreeMap::new() },
            interval: Duration::from_secs(60),
            emf_file: None,
        }
    }
}

/// A sink the publisher hands each interval's data to.
enum Sink {
    CloudWatch(CloudWatch),
    Emf(Emf),
}

/// The publishing task; [`Publisher::finish`] publishes the last interval.
pub struct Publisher {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Longest the last publish may hold up a stopping worker.
const LAST_PUBLISH: Duration = Duration::from_secs(5);

impl Publisher {
    /// Starts publishing `metrics` under the namespace `namespace` (the
    /// application), or nothing when no sink or level NONE is asked for.
    pub fn start(metrics: Arc<Metrics>, settings: &PublishSettings, namespace: &str, cloudwatch: &aws_sdk_cloudwatch::Client) -> Result<Option<Self>, String> {
        if settings.sinks.is_empty() || settings.selection.level == Level::None {
            return Ok(None);
        }
        let mut sinks = Vec::new();
        for kind in &settings.sinks {
            sinks.push(match kind {
                SinkKind::CloudWatch => Sink::CloudWatch(CloudWatch::new(cloudwatch.clone(), namespace)),
                SinkKind::Emf => Sink::Emf(Emf::open(settings.emf_file.as_deref(), namespace)?),
            });
        }
        metrics.keep_forgotten_series();
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(publish_every(metrics, settings.selection.clone(), settings.interval, sinks, stopped));
        Ok(Some(Publisher { stop, task }))
    }

    /// Publishes what the last interval did, then stops.
    pub async fn finish(self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(LAST_PUBLISH, self.task).await.is_err() {
            tracing::warn!("the last metrics publish took over {LAST_PUBLISH:?}; stopping without it");
        }
    }
}

async fn publish_every(metrics: Arc<Metrics>, selection: Selection, interval: Duration, mut sinks: Vec<Sink>, mut stopped: oneshot::Receiver<()>) {
    let mut before = Series::new();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = tokio::select! {
            _ = ticks.tick() => false,
            _ = &mut stopped => true,
        };
        // Series of shards this worker no longer holds were kept for this reading.
        let forgotten = metrics.forgotten_series();
        let (now, kinds) = snapshot::read(&metrics.encode());
        forgotten.remove();
        let data = kcl::data(&before, &now, &kinds, &selection);
        before = now;
        let at = SystemTime::now();
        for sink in &mut sinks {
            match sink {
                Sink::CloudWatch(sink) => sink.publish(data.clone(), at).await,
                Sink::Emf(sink) => sink.publish(&data, at),
            }
        }
        if last {
            return;
        }
    }
}
