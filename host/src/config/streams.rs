//! The streams an application reads: `stream` (one), or `streams` (a
//! list, each a name or ARN or a table with its own initial position):
//!
//! ```toml
//! streams = ["orders", { name = "refunds", initial_position = "LATEST" }]
//! ```
//!
//! `--stream` given more than once (or `KCL_HOST_STREAM=a,b`) is a list too.
//! A DynamoDB stream (its ARN, or `dynamodb_table`) is read alone, and
//! `needs_images` says which item images its records must carry.

use serde::Deserialize;

use super::values::{initial_position, stream_name};
use super::{ConfigError, Layer};
use crate::shard::InitialPosition;
use crate::source::dynamodb::Images;
use crate::stream::{StreamKind, StreamSpec};

/// One entry of `streams`: a name or ARN, or a table.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum StreamEntry {
    /// The stream's name or ARN; it starts at the application's `initial_position`.
    Name(String),
    /// The stream with its own initial position.
    Table {
        /// The stream's name or ARN.
        name: String,
        /// TRIM_HORIZON, LATEST or AT_TIMESTAMP.
        initial_position: Option<String>,
        /// With AT_TIMESTAMP: an RFC 3339 time.
        initial_timestamp: Option<String>,
    },
}

/// The configured streams, and whether they were given as a list (an empty
/// lease table then gets keys that name the stream, even for one).
pub(super) fn resolve(layer: &Layer, default: &InitialPosition) -> Result<(Vec<StreamSpec>, bool), ConfigError> {
    let one = |name: &str| -> Result<StreamSpec, ConfigError> {
        let (name, kind) = stream_name(name)?;
        Ok(StreamSpec { name, initial_position: default.clone(), kind })
    };
    let entries = match (&layer.stream, &layer.streams, &layer.dynamodb_table) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            return Err(ConfigError::Invalid {
                setting: "streams",
                value: "more than one of `stream`, `streams` and `dynamodb_table`".into(),
                reason: "give `stream` (one stream), `streams` (a list) or `dynamodb_table` (a table's stream), one of them".into(),
            });
        }
        (None, None, Some(table)) => {
            let spec = StreamSpec { name: table.clone(), initial_position: default.clone(), kind: StreamKind::DynamoDbTable };
            return dynamodb_alone(vec![spec], false);
        }
        (Some(name), None, None) => return dynamodb_alone(vec![one(name)?], false),
        (None, Some(list), None) => list,
        (None, None, None) => return Err(ConfigError::Missing { setting: "stream", flag: "stream", env: "STREAM" }),
    };
    if entries.is_empty() {
        return Err(ConfigError::Invalid { setting: "streams", value: "[]".into(), reason: "list at least one stream".into() });
    }
    let mut specs: Vec<StreamSpec> = Vec::with_capacity(entries.len());
    for entry in entries {
        let spec = match entry {
            StreamEntry::Table { name, initial_position: position, initial_timestamp } if position.is_some() || initial_timestamp.is_some() => {
                StreamSpec { initial_position: initial_position(position.as_deref(), initial_timestamp.as_deref())?, ..one(name)? }
            }
            StreamEntry::Name(name) | StreamEntry::Table { name, .. } => one(name)?,
        };
        if specs.iter().any(|s| s.name == spec.name) {
            return Err(ConfigError::Invalid { setting: "streams", value: spec.name, reason: "is listed twice; list each stream once".into() });
        }
        specs.push(spec);
    }
    dynamodb_alone(specs, true)
}

/// The images the processor needs (`needs_images`), which only a DynamoDB
/// stream has.
pub(super) fn needs_images(layer: &Layer, specs: &[StreamSpec]) -> Result<Option<Images>, ConfigError> {
    let Some(text) = &layer.needs_images else { return Ok(None) };
    let invalid = |reason: String| ConfigError::Invalid { setting: "needs_images", value: text.clone(), reason };
    let images = text.parse::<Images>().map_err(invalid)?;
    if specs.iter().all(|spec| spec.kind == StreamKind::Kinesis) {
        return Err(invalid("only a DynamoDB stream's records carry item images: give --dynamodb-table or a DynamoDB stream's ARN".into()));
    }
    Ok(Some(images))
}

/// A DynamoDB stream is read by an application of its own (its lease keys
/// are shard ids, as the DynamoDB Streams Kinesis Adapter's), from
/// TRIM_HORIZON or LATEST (it has no AT_TIMESTAMP).
fn dynamodb_alone(specs: Vec<StreamSpec>, listed: bool) -> Result<(Vec<StreamSpec>, bool), ConfigError> {
    let Some(dynamodb) = specs.iter().find(|s| s.kind != StreamKind::Kinesis) else { return Ok((specs, listed)) };
    let invalid = |reason: &str| ConfigError::Invalid { setting: "stream", value: dynamodb.name.clone(), reason: reason.into() };
    if listed {
        return Err(invalid("a DynamoDB stream is read by an application of its own: give it alone as `stream` (or `dynamodb_table`)"));
    }
    if matches!(dynamodb.initial_position, InitialPosition::AtTimestamp(_)) {
        return Err(invalid("DynamoDB Streams has no AT_TIMESTAMP: start at TRIM_HORIZON (the last 24 hours) or LATEST"));
    }
    Ok((specs, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(toml_text: &str) -> Result<(Vec<StreamSpec>, bool), ConfigError> {
        resolve(&toml::from_str(toml_text).unwrap(), &InitialPosition::TrimHorizon)
    }

    #[test]
    fn a_list_gives_each_stream_its_initial_position() {
        let (specs, listed) = resolved(
            r#"streams = ["orders", "arn:aws:kinesis:us-east-1:1:stream/payments", { name = "refunds", initial_position = "LATEST" }]"#,
        )
        .unwrap();
        assert!(listed);
        let named: Vec<(&str, &InitialPosition)> = specs.iter().map(|s| (s.name.as_str(), &s.initial_position)).collect();
        assert_eq!(
            named,
            [("orders", &InitialPosition::TrimHorizon), ("payments", &InitialPosition::TrimHorizon), ("refunds", &InitialPosition::Latest)]
        );
        let (one, listed) = resolved(r#"stream = "orders""#).unwrap();
        assert_eq!((one.len(), listed), (1, false));
    }

    #[test]
    fn a_bad_list_is_named_with_the_fix() {
        for (text, words) in [
            (r#"stream = "a"
streams = ["b"]"#, "one of them"),
            (r#"stream = "a"
dynamodb_table = "t""#, "one of them"),
            ("streams = []", "at least one"),
            (r#"streams = ["a", "a"]"#, "listed twice"),
            (r#"streams = [{ name = "a", initial_position = "AT_TIMESTAMP" }]"#, "initial_timestamp"),
        ] {
            let err = resolved(text).unwrap_err().to_string();
            assert!(err.contains(words), "{text}: {err}");
        }
    }

    #[test]
    fn a_dynamodb_stream_is_read_alone_and_never_at_a_timestamp() {
        let arn = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-12-07T03:13:42.339";
        let (specs, listed) = resolved(&format!("stream = \"{arn}\"")).unwrap();
        assert_eq!((specs[0].name.as_str(), specs[0].kind, listed), (arn, StreamKind::DynamoDbStream, false));
        let (specs, _) = resolved(r#"dynamodb_table = "orders""#).unwrap();
        assert_eq!((specs[0].name.as_str(), specs[0].kind), ("orders", StreamKind::DynamoDbTable));
        let listed = resolved(&format!("streams = [\"orders\", \"{arn}\"]")).unwrap_err().to_string();
        assert!(listed.contains("an application of its own"), "{listed}");
        let layer: Layer = toml::from_str(&format!("stream = \"{arn}\"")).unwrap();
        let at = resolve(&layer, &InitialPosition::AtTimestamp(1)).unwrap_err().to_string();
        assert!(at.contains("no AT_TIMESTAMP"), "{at}");
        let bad = resolved(r#"stream = "arn:aws:dynamodb:us-east-1:1:table/orders""#).unwrap_err().to_string();
        assert!(bad.contains("table/<table>/stream/<label>"), "{bad}");
    }

    #[test]
    fn images_are_asked_of_a_dynamodb_stream_only() {
        let images = |toml_text: &str| {
            let layer: Layer = toml::from_str(toml_text).unwrap();
            needs_images(&layer, &resolve(&layer, &InitialPosition::TrimHorizon).unwrap().0)
        };
        assert_eq!(images("dynamodb_table = \"orders\"\nneeds_images = \"new\"").unwrap(), Some(Images::New));
        assert_eq!(images("dynamodb_table = \"orders\"").unwrap(), None);
        let kinesis = images("stream = \"orders\"\nneeds_images = \"new\"").unwrap_err().to_string();
        assert!(kinesis.contains("only a DynamoDB stream"), "{kinesis}");
        let unknown = images("dynamodb_table = \"orders\"\nneeds_images = \"both\"").unwrap_err().to_string();
        assert!(unknown.contains("new, old, new-and-old"), "{unknown}");
    }
}
