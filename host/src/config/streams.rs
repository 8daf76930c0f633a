//! The streams an application reads: `stream` (one), or `streams` (a
//! list, each a name or ARN or a table with its own initial position):
//!
//! ```toml
//! streams = ["orders", { name = "refunds", initial_position = "LATEST" }]
//! ```
//!
//! `--stream` given more than once (or `KCL_HOST_STREAM=a,b`) is a list too.

use serde::Deserialize;

use super::values::{initial_position, stream_name};
use super::{ConfigError, Layer};
use crate::shard::InitialPosition;
use crate::stream::StreamSpec;

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
    let entries = match (&layer.stream, &layer.streams) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid {
                setting: "streams",
                value: "both `stream` and `streams`".into(),
                reason: "give `stream` (one stream) or `streams` (a list), not both".into(),
            });
        }
        (Some(one), None) => return Ok((vec![StreamSpec { name: stream_name(one)?, initial_position: default.clone() }], false)),
        (None, Some(list)) => list,
        (None, None) => return Err(ConfigError::Missing { setting: "stream", flag: "stream", env: "STREAM" }),
    };
    if entries.is_empty() {
        return Err(ConfigError::Invalid { setting: "streams", value: "[]".into(), reason: "list at least one stream".into() });
    }
    let mut specs: Vec<StreamSpec> = Vec::with_capacity(entries.len());
    for entry in entries {
        let spec = match entry {
            StreamEntry::Table { name, initial_position: position, initial_timestamp } if position.is_some() || initial_timestamp.is_some() => {
                StreamSpec { name: stream_name(name)?, initial_position: initial_position(position.as_deref(), initial_timestamp.as_deref())? }
            }
            StreamEntry::Name(name) | StreamEntry::Table { name, .. } => StreamSpec { name: stream_name(name)?, initial_position: default.clone() },
        };
        if specs.iter().any(|s| s.name == spec.name) {
            return Err(ConfigError::Invalid { setting: "streams", value: spec.name, reason: "is listed twice; list each stream once".into() });
        }
        specs.push(spec);
    }
    Ok((specs, true))
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
streams = ["b"]"#, "not both"),
            ("streams = []", "at least one"),
            (r#"streams = ["a", "a"]"#, "listed twice"),
            (r#"streams = [{ name = "a", initial_position = "AT_TIMESTAMP" }]"#, "initial_timestamp"),
        ] {
            let err = resolved(text).unwrap_err().to_string();
            assert!(err.contains(words), "{text}: {err}");
        }
    }
}
