//! Single values read from text: durations with a unit, stream names and
//! ARNs, application names, the initial position.

use std::time::Duration;

use aws_smithy_types::date_time::{DateTime, Format};

use super::ConfigError;
use crate::shard::InitialPosition;
use crate::stream::StreamKind;

/// The stream's name, given its name or (as Java KCL accepts) its ARN,
/// `arn:<partition>:kinesis:<region>:<account>:stream/<name>`; or a
/// DynamoDB stream's ARN, kept whole.
pub(super) fn stream_name(given: &str) -> Result<(String, StreamKind), ConfigError> {
    if !given.starts_with("arn:") {
        return Ok((given.to_owned(), StreamKind::Kinesis));
    }
    let invalid = |reason: &str| ConfigError::Invalid { setting: "stream", value: given.to_owned(), reason: reason.to_owned() };
    let parts: Vec<&str> = given.splitn(6, ':').collect();
    match parts[..] {
        [_, _, "kinesis", _, _, resource] => match resource.strip_prefix("stream/") {
            Some(name) if !name.is_empty() && !name.contains('/') => Ok((name.to_owned(), StreamKind::Kinesis)),
            _ => Err(invalid("a stream ARN ends in `stream/<name>`")),
        },
        [_, _, "dynamodb", _, _, resource] => match resource.split('/').collect::<Vec<_>>()[..] {
            ["table", table, "stream", label] if !table.is_empty() && !label.is_empty() => Ok((given.to_owned(), StreamKind::DynamoDbStream)),
            _ => Err(invalid("a DynamoDB stream ARN ends in `table/<table>/stream/<label>`")),
        },
        _ => Err(invalid(
            "give a Kinesis stream's name or ARN (`arn:aws:kinesis:<region>:<account>:stream/<name>`) or a DynamoDB stream's ARN \
             (`arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>`)",
        )),
    }
}

/// The longest application name whose tables all fit DynamoDB's 255
/// characters: `<application>-KclHostComponents` is the longest.
pub(super) const MAX_APPLICATION: usize = 255 - "-KclHostComponents".len();

/// An application name DynamoDB takes for the lease table and the tables named after it.
pub(super) fn check_application(name: &str) -> Result<(), ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid { setting: "application", value: name.to_owned(), reason };
    if name.len() < 3 || name.len() > MAX_APPLICATION {
        return Err(invalid(format!(
            "use 3 to {MAX_APPLICATION} characters (it names the lease table, and `<application>-KclHostControl` and \
             `<application>-KclHostComponents`, which DynamoDB allows up to 255)"
        )));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))) {
        return Err(invalid(format!("`{bad}` cannot be in a DynamoDB table name: use letters, digits, `_`, `-` and `.`")));
    }
    Ok(())
}

/// `hostname-pid-random`: unique per process, readable in the lease table.
pub(super) fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "worker".into());
    format!("{host}-{}-{:04x}", std::process::id(), fastrand::u16(..))
}

pub(super) fn positive(setting: &'static str, value: usize) -> Result<usize, ConfigError> {
    if value == 0 {
        return Err(ConfigError::Invalid { setting, value: "0".into(), reason: "must be at least 1".into() });
    }
    Ok(value)
}

pub(super) fn initial_position(position: Option<&str>, timestamp: Option<&str>) -> Result<InitialPosition, ConfigError> {
    let invalid = |value: &str, reason: &str| ConfigError::Invalid {
        setting: "initial_position",
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    match (position.unwrap_or("TRIM_HORIZON").to_ascii_uppercase().as_str(), timestamp) {
        ("TRIM_HORIZON", None) => Ok(InitialPosition::TrimHorizon),
        ("LATEST", None) => Ok(InitialPosition::Latest),
        ("AT_TIMESTAMP", Some(ts)) => DateTime::from_str(ts, Format::DateTime)
            .ok()
            .and_then(|t| t.to_millis().ok())
            .map(InitialPosition::AtTimestamp)
            .ok_or_else(|| ConfigError::Invalid {
                setting: "initial_timestamp",
                value: ts.to_owned(),
                reason: "use RFC 3339, like 2026-01-31T12:00:00Z".into(),
            }),
        ("AT_TIMESTAMP", None) => Err(invalid("AT_TIMESTAMP", "also give initial_timestamp (RFC 3339)")),
        (other @ ("TRIM_HORIZON" | "LATEST"), Some(_)) => Err(invalid(other, "initial_timestamp only goes with AT_TIMESTAMP")),
        (other, _) => Err(invalid(other, "use TRIM_HORIZON, LATEST or AT_TIMESTAMP")),
    }
}

/// The longest duration any setting takes: longer ones are typos, and
/// would overflow the clock arithmetic they feed.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// Parses `250ms`, `10s`, `2m`, `1h`. A bare number is refused: its unit
/// would be a guess.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let seconds = |factor: u64| n.checked_mul(factor).map(Duration::from_secs);
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3600),
        _ => None,
    }
}

/// `value` read as a duration with a unit (`500ms`, `10s`, `2m`, `1h`), or
/// `default` when there is none.
pub fn duration(setting: &'static str, value: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    let Some(text) = value else { return Ok(default) };
    let invalid = |reason: &str| ConfigError::Invalid { setting, value: text.to_owned(), reason: reason.to_owned() };
    match parse_duration(text) {
        None => Err(invalid("use a duration with a unit, like 500ms, 10s, 2m or 1h")),
        Some(d) if d.is_zero() => Err(invalid("must be longer than zero")),
        Some(d) if d > MAX_DURATION => Err(invalid("must be at most 24h")),
        Some(d) => Ok(d),
    }
}
