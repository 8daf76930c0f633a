//! What an operator declares: `--output NAME=URI`, or `[outputs]` in the
//! config file.
//!
//! | URI | target |
//! |---|---|
//! | `kinesis:STREAM` (a name or an ARN) | PutRecords to that stream |
//! | `dynamodb:TABLE` | each record's data, a JSON object, put as an item |
//! | `http://…`, `https://…` | POST of JSON lines |
//! | `stdout` | JSON lines on standard output |
//! | `file:PATH` | JSON lines appended to a file |

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// Where one declared target writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// A Kinesis stream, by name or ARN.
    Kinesis(String),
    /// A DynamoDB table.
    DynamoDb(String),
    /// An HTTP(S) endpoint that takes a POST of JSON lines.
    Http(String),
    /// Standard output.
    Stdout,
    /// A file, appended to.
    File(PathBuf),
}

/// A target the operator declared under a name processors send to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputSpec {
    /// The name processors use.
    pub name: String,
    /// Where it writes.
    pub target: TargetSpec,
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetSpec::Kinesis(stream) => write!(f, "kinesis:{stream}"),
            TargetSpec::DynamoDb(table) => write!(f, "dynamodb:{table}"),
            TargetSpec::Http(url) => f.write_str(url),
            TargetSpec::Stdout => f.write_str("stdout"),
            TargetSpec::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

impl TargetSpec {
    /// Reads a target URI; the error says what is wrong and what is accepted.
    pub fn parse(uri: &str) -> Result<Self, String> {
        let accepted = "use kinesis:STREAM, dynamodb:TABLE, http(s)://HOST/PATH, stdout or file:PATH";
        let nonempty = |rest: &str, what: &str| {
            if rest.is_empty() { Err(format!("`{uri}` names no {what}; {accepted}")) } else { Ok(rest.to_owned()) }
        };
        if let Some(stream) = uri.strip_prefix("kinesis:") {
            return nonempty(stream, "stream").map(TargetSpec::Kinesis);
        }
        if let Some(table) = uri.strip_prefix("dynamodb:") {
            return nonempty(table, "table").map(TargetSpec::DynamoDb);
        }
        if let Some(path) = uri.strip_prefix("file:") {
            return nonempty(path, "file").map(|path| TargetSpec::File(path.into()));
        }
        if uri == "stdout" {
            return Ok(TargetSpec::Stdout);
        }
        if let Some(rest) = uri.strip_prefix("http://").or_else(|| uri.strip_prefix("https://")) {
            nonempty(rest, "host")?;
            return reqwest::Url::parse(uri).map(|_| TargetSpec::Http(uri.to_owned())).map_err(|e| format!("`{uri}` is not a URL: {e}"));
        }
        Err(format!("`{uri}` is not an output target; {accepted}"))
    }
}

/// The declared outputs, by name: each name is letters, digits, `-`, `_`
/// or `.`, and each URI a target.
pub fn parse_outputs(declared: &BTreeMap<String, String>) -> Result<Vec<OutputSpec>, String> {
    declared
        .iter()
        .map(|(name, uri)| {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(format!("output name `{name}` is not usable: use letters, digits, `-`, `_` and `.`"));
            }
            let target = TargetSpec::parse(uri).map_err(|e| format!("output `{name}`: {e}"))?;
            Ok(OutputSpec { name: name.clone(), target })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_target_reads_back_as_written() {
        for uri in ["kinesis:enriched", "kinesis:arn:aws:kinesis:eu-west-1:123456789012:stream/out", "dynamodb:totals", "https://api.example.com/ingest", "stdout", "file:/tmp/out.jsonl"] {
            assert_eq!(TargetSpec::parse(uri).unwrap().to_string(), uri);
        }
    }

    #[test]
    fn a_bad_declaration_names_itself_and_what_is_accepted() {
        let bad = |name: &str, uri: &str| parse_outputs(&BTreeMap::from([(name.to_owned(), uri.to_owned())])).unwrap_err();
        assert!(bad("out", "s3:bucket").contains("`s3:bucket` is not an output target; use kinesis:STREAM"));
        assert!(bad("out", "kinesis:").contains("names no stream"));
        assert!(bad("out put", "stdout").contains("output name `out put`"));
        assert!(bad("out", "https://").contains("names no host"));
    }
}
