//! The Embedded Metric Format sink: each interval's data as JSON lines
//! that the CloudWatch agent, the `awslogs` log driver or Lambda turn into
//! metrics without an API call. One line per set of dimension values, with
//! every metric that shares it.
//!
//! EMF carries a value, not a statistic set: a count or a size is the
//! interval's sum, a time the interval's average.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::kcl::{Datum, Unit};

/// Metrics in one directive: EMF allows at most 100.
const METRICS_PER_LINE: usize = 100;

/// Writes EMF lines to stdout or a file.
pub struct Emf {
    namespace: String,
    file: Option<File>,
}

impl Emf {
    /// Lines for `namespace`, appended to `file` (created if missing), or
    /// written to stdout.
    pub fn open(file: Option<&Path>, namespace: &str) -> Result<Self, String> {
        let file = match file {
            Some(path) => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("cannot open the EMF file {}: {e}", path.display()))?,
            ),
            None => None,
        };
        Ok(Emf { namespace: namespace.to_owned(), file })
    }

    /// Writes `data`, measured at `at`.
    pub fn publish(&mut self, data: &[Datum], at: SystemTime) {
        let text: String = lines(&self.namespace, data, at).into_iter().map(|line| line + "\n").collect();
        let written = match &mut self.file {
            Some(file) => file.write_all(text.as_bytes()),
            // One write of whole lines: a stdout output target's lines stay apart.
            None => std::io::stdout().lock().write_all(text.as_bytes()),
        };
        if let Err(e) = written {
            tracing::warn!("could not write EMF metrics: {e}");
        }
    }
}

/// The EMF documents for `data`, one per set of dimension values.
pub fn lines(namespace: &str, data: &[Datum], at: SystemTime) -> Vec<String> {
    let timestamp = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut by_dimensions: BTreeMap<&[(String, String)], Vec<&Datum>> = BTreeMap::new();
    for datum in data {
        by_dimensions.entry(&datum.dimensions).or_default().push(datum);
    }
    let mut lines = Vec::new();
    for (dimensions, data) in by_dimensions {
        for data in data.chunks(METRICS_PER_LINE) {
            let mut document = Map::new();
            for (name, value) in dimensions {
                document.insert(name.clone(), Value::String(value.clone()));
            }
            let mut metrics = Vec::new();
            for datum in data {
                let value = match datum.unit {
                    Unit::Milliseconds => datum.stats.sum / datum.stats.count,
                    Unit::Count | Unit::Bytes => datum.stats.sum,
                };
                document.insert(datum.name.clone(), json!(value));
                metrics.push(json!({ "Name": datum.name, "Unit": datum.unit.as_str() }));
            }
            let names: Vec<&str> = dimensions.iter().map(|(name, _)| name.as_str()).collect();
            document.insert(
                "_aws".to_owned(),
                json!({
                    "Timestamp": timestamp,
                    "CloudWatchMetrics": [{ "Namespace": namespace, "Dimensions": [names], "Metrics": metrics }],
                }),
            );
            lines.push(Value::Object(document).to_string());
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::kcl::Stats;

    #[test]
    fn one_line_per_dimension_values_with_every_metric_that_shares_them() {
        let shard = vec![("Operation".to_owned(), "ProcessTask".to_owned()), ("ShardId".to_owned(), "shardId-0".to_owned())];
        let datum = |name: &str, unit, count, sum| Datum { name: name.into(), unit, dimensions: shard.clone(), stats: Stats { count, sum, min: 0.0, max: sum } };
        let data = [datum("RecordsProcessed", Unit::Count, 1.0, 40.0), datum("RecordProcessor.processRecords.Time", Unit::Milliseconds, 4.0, 20.0)];
        let lines = lines("orders-app", &data, UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000));
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(line["ShardId"], "shardId-0");
        assert_eq!(line["RecordsProcessed"], 40.0);
        assert_eq!(line["RecordProcessor.processRecords.Time"], 5.0, "a time is the interval's average");
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(line["_aws"]["Timestamp"], 1_700_000_000_000u64);
        assert_eq!(directive["Namespace"], "orders-app");
        assert_eq!(directive["Dimensions"], json!([["Operation", "ShardId"]]));
        assert_eq!(directive["Metrics"][1], json!({ "Name": "RecordProcessor.processRecords.Time", "Unit": "Milliseconds" }));
    }
}
