//! A reading of every series at one moment, taken from the registry's own
//! OpenMetrics text: the one record of each metric that the CloudWatch and
//! EMF sinks read, as Prometheus scrapes it.

use std::collections::BTreeMap;

/// What kind of series a family holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (reset when a shard's series are forgotten).
    Counter,
    /// A value now.
    Gauge,
    /// Observations counted into buckets.
    Histogram,
}

/// One series' value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A counter's or gauge's value.
    Number(f64),
    /// A histogram.
    Histogram {
        /// The observations' sum.
        sum: f64,
        /// How many there were.
        count: f64,
        /// Each bucket's upper bound, and how many were at or below it.
        buckets: Vec<(f64, f64)>,
    },
}

/// Series, keyed by family (without the `kcl_host_` prefix) and labels.
pub type Series = BTreeMap<(String, Labels), Value>;
/// A series' labels, the worker's own (`application`, `worker`) included.
pub type Labels = BTreeMap<String, String>;

/// Every series of the text `text`, and each family's kind.
pub fn read(text: &str) -> (Series, BTreeMap<String, Kind>) {
    let mut kinds = BTreeMap::new();
    let mut series = Series::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let (Some(name), Some(kind)) = (words.next(), words.next()) else { continue };
            let kind = match kind {
                "counter" => Kind::Counter,
                "gauge" => Kind::Gauge,
                "histogram" => Kind::Histogram,
                _ => continue,
            };
            kinds.insert(unprefixed(name).to_owned(), kind);
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let Some((name, labels, value)) = sample(line) else { continue };
        let name = unprefixed(name);
        if let Some(family) = name.strip_suffix("_total").filter(|f| kinds.get(*f) == Some(&Kind::Counter)) {
            series.insert((family.to_owned(), labels), Value::Number(value));
        } else if kinds.get(name) == Some(&Kind::Gauge) {
            series.insert((name.to_owned(), labels), Value::Number(value));
        } else if let Some((family, part)) = histogram_part(name, &kinds) {
            histogram(&mut series, family, labels, part, value);
        }
    }
    (series, kinds)
}

fn unprefixed(name: &str) -> &str {
    name.strip_prefix("kcl_host_").unwrap_or(name)
}

/// `_sum`, `_count` or `_bucket` of a histogram family.
fn histogram_part<'a>(name: &'a str, kinds: &BTreeMap<String, Kind>) -> Option<(&'a str, &'a str)> {
    ["_sum", "_count", "_bucket"].into_iter().find_map(|part| {
        let family = name.strip_suffix(part)?;
        (kinds.get(family) == Some(&Kind::Histogram)).then_some((family, part))
    })
}

fn histogram(series: &mut Series, family: &str, mut labels: Labels, part: &str, value: f64) {
    let le = labels.remove("le");
    let entry = series.entry((family.to_owned(), labels)).or_insert(Value::Histogram { sum: 0.0, count: 0.0, buckets: Vec::new() });
    let Value::Histogram { sum, count, buckets } = entry else { return };
    match (part, le) {
        ("_sum", _) => *sum = value,
        ("_count", _) => *count = value,
        (_, Some(le)) => buckets.push((if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::INFINITY) }, value)),
        _ => {}
    }
}

/// `name{labels} value` (an exemplar or timestamp after the value is ignored).
fn sample(line: &str) -> Option<(&str, Labels, f64)> {
    let (name, labels, rest) = match line.split_once('{') {
        Some((name, rest)) => {
            let (labels, rest) = labels(rest)?;
            (name, labels, rest)
        }
        None => {
            let (name, rest) = line.split_once(' ')?;
            (name, Labels::new(), rest)
        }
    };
    Some((name, labels, rest.trim_start().split(' ').next()?.parse().ok()?))
}

/// The labels of `text` (what follows `{`), and what follows their `}`.
fn labels(text: &str) -> Option<(Labels, &str)> {
    let mut labels = Labels::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, quoted) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(match chars.next()?.1 {
                    'n' => '\n',
                    escaped => escaped,
                }),
                (i, '"') => break i + 1,
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.to_owned(), value);
        rest = &quoted[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters_gauges_and_histograms_with_escaped_labels() {
        let text = "# HELP kcl_host_records_processed Records\n\
                    # TYPE kcl_host_records_processed counter\n\
                    kcl_host_records_processed_total{application=\"a\",shard=\"s\\\"1\\\\\"} 3\n\
                    # TYPE kcl_host_leases_held gauge\n\
                    kcl_host_leases_held{application=\"a\"} 2\n\
                    # TYPE kcl_host_call_seconds histogram\n\
                    kcl_host_call_seconds_sum{shard=\"s\"} 0.5\n\
                    kcl_host_call_seconds_count{shard=\"s\"} 2\n\
                    kcl_host_call_seconds_bucket{le=\"0.1\",shard=\"s\"} 1\n\
                    kcl_host_call_seconds_bucket{le=\"+Inf\",shard=\"s\"} 2\n\
                    # TYPE kcl_host_build info\n\
                    kcl_host_build_info{version=\"0.1.0 (commit x)\"} 1\n\
                    # EOF\n";
        let (series, kinds) = read(text);
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Labels>();
        assert_eq!(series[&("records_processed".into(), labels(&[("application", "a"), ("shard", "s\"1\\")]))], Value::Number(3.0));
        assert_eq!(series[&("leases_held".into(), labels(&[("application", "a")]))], Value::Number(2.0));
        assert_eq!(
            series[&("call_seconds".into(), labels(&[("shard", "s")]))],
            Value::Histogram { sum: 0.5, count: 2.0, buckets: vec![(0.1, 1.0), (f64::INFINITY, 2.0)] }
        );
        assert_eq!(series.len(), 3, "the info family is not a measurement: {series:?}");
        assert_eq!(kinds["call_seconds"], Kind::Histogram);
    }
}
