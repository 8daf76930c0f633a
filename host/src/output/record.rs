//! One record sent to a target, and the JSON line the HTTP, file and
//! stdout targets write for it.

use base64::Engine;
use serde::Serialize;

/// A record a processor sent: a view into the columns its `send` gave,
/// which the shard's queue keeps as they came until a target acknowledged
/// them (no copy per record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutRecord<'a> {
    /// The payload.
    pub data: &'a [u8],
    /// Places the record (a Kinesis shard); passed on to every target.
    pub partition_key: &'a str,
    /// Places a Kinesis record instead of the partition key's hash.
    pub explicit_hash_key: Option<&'a str>,
}

/// A record as a JSON line: `{"partition_key":…,"data":…}`, the data as a
/// string when it is UTF-8, else base64 as `data_base64`; an explicit hash
/// key as `explicit_hash_key` when there is one.
#[derive(Serialize)]
struct Line<'a> {
    partition_key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    explicit_hash_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_base64: Option<String>,
}

/// `records` as JSON lines, each ending in `\n`.
pub fn json_lines(records: &[OutRecord<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in records {
        let text = std::str::from_utf8(record.data).ok();
        let line = Line {
            partition_key: record.partition_key,
            explicit_hash_key: record.explicit_hash_key,
            data: text,
            data_base64: text.is_none().then(|| base64::engine::general_purpose::STANDARD.encode(record.data)),
        };
        serde_json::to_writer(&mut out, &line).expect("a line serializes");
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_stays_text_and_bytes_go_base64() {
        let records = [
            OutRecord { data: br#"{"n":1}"#, partition_key: "k", explicit_hash_key: None },
            OutRecord { data: &[0xff, 0], partition_key: "k", explicit_hash_key: Some("42") },
        ];
        let text = String::from_utf8(json_lines(&records)).unwrap();
        assert_eq!(
            text,
            "{\"partition_key\":\"k\",\"data\":\"{\\\"n\\\":1}\"}\n{\"partition_key\":\"k\",\"explicit_hash_key\":\"42\",\"data_base64\":\"/wA=\"}\n"
        );
    }
}
