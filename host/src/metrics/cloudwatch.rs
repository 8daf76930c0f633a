//! The `PutMetricData` sink: each interval's data in calls of up to 1,000
//! values (CloudWatch's limit), each value a statistic set. A call the
//! SDK's retries could not land is kept and sent with the next interval's
//! (up to [`KEPT_INTERVALS`] of them); failures are logged at most once a
//! minute, with how many there were.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_cloudwatch::error::DisplayErrorContext;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit, StatisticSet};
use aws_smithy_types::DateTime;

use super::kcl::{Datum, Unit};

/// Values in one `PutMetricData` call: CloudWatch takes at most 1,000.
const VALUES_PER_CALL: usize = 1000;
/// Intervals of data kept while CloudWatch cannot be reached.
const KEPT_INTERVALS: usize = 10;
/// How often a failing CloudWatch is logged.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Publishes to one namespace.
pub struct CloudWatch {
    client: aws_sdk_cloudwatch::Client,
    namespace: String,
    /// Calls not yet accepted, oldest first.
    unsent: VecDeque<Vec<MetricDatum>>,
    failures: u64,
    last_logged: Option<Instant>,
}

impl CloudWatch {
    /// A sink publishing under `namespace`.
    pub fn new(client: aws_sdk_cloudwatch::Client, namespace: &str) -> Self {
        CloudWatch { client, namespace: namespace.to_owned(), unsent: VecDeque::new(), failures: 0, last_logged: None }
    }

    /// Sends `data`, measured at `at`, after whatever is still unsent.
    pub async fn publish(&mut self, data: Vec<Datum>, at: SystemTime) {
        let timestamp = DateTime::from(at);
        let data: Vec<MetricDatum> = data.into_iter().map(|datum| metric_datum(datum, timestamp)).collect();
        for call in data.chunks(VALUES_PER_CALL) {
            self.unsent.push_back(call.to_vec());
        }
        while self.unsent.len() > KEPT_INTERVALS {
            self.unsent.pop_front();
            self.failed("CloudWatch stayed unreachable: dropped the oldest unsent metrics".to_owned());
        }
        while let Some(call) = self.unsent.front() {
            let sent = self.client.put_metric_data().namespace(&self.namespace).set_metric_data(Some(call.clone())).send().await;
            match sent {
                Ok(_) => {
                    self.unsent.pop_front();
                }
                Err(e) => {
                    self.failed(format!("PutMetricData: {}; keeping the metrics for the next publish", DisplayErrorContext(&e)));
                    return;
                }
            }
        }
    }

    fn failed(&mut self, message: String) {
        self.failures += 1;
        if self.last_logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::warn!(failures = self.failures, "publishing metrics to CloudWatch failed: {message}");
            self.last_logged = Some(Instant::now());
            self.failures = 0;
        }
    }
}

fn metric_datum(datum: Datum, timestamp: DateTime) -> MetricDatum {
    let dimensions = datum.dimensions.into_iter().map(|(name, value)| Dimension::builder().name(name).value(value).build()).collect();
    let stats = StatisticSet::builder()
        .sample_count(datum.stats.count)
        .sum(datum.stats.sum)
        .minimum(datum.stats.min)
        .maximum(datum.stats.max)
        .build();
    MetricDatum::builder()
        .metric_name(datum.name)
        .set_dimensions(Some(dimensions))
        .unit(match datum.unit {
            Unit::Count => StandardUnit::Count,
            Unit::Bytes => StandardUnit::Bytes,
            Unit::Milliseconds => StandardUnit::Milliseconds,
        })
        .statistic_values(stats)
        .timestamp(timestamp)
        .build()
}
