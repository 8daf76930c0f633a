//! The records `replay` (and `--swap-canary-input`) read, in the shapes
//! users have them:
//! - kcl-host's own lines, one JSON object per line: `data` (UTF-8) or
//!   `data_base64`, and optional `partition_key`, `sequence_number`,
//!   `arrival` (RFC 3339); what is missing is generated;
//! - the output of `aws kinesis get-records` (`Records` with base64 `Data`,
//!   `SequenceNumber`, `PartitionKey`, `ApproximateArrivalTimestamp`), one
//!   page or several one after another;
//! - a Lambda Kinesis event (`Records[].kinesis`);
//! - DynamoDB stream records: a Lambda DynamoDB event or the output of
//!   `aws dynamodbstreams get-records` (`Records[]` with `eventName` and
//!   `dynamodb`). Each becomes a record as `kcl-host run` gives it from a
//!   table's stream (the change as JSON, its `SequenceNumber`, arrival at
//!   `ApproximateCreationDateTime`); its partition key is the item's key
//!   attribute values in the order of their names, joined by `/` (a record
//!   alone does not say which one is the table's partition key).
//!
//! Each is recognised by its shape. A KPL aggregate becomes its user
//! records, as in `kcl-host run`; records must be in shard order.

use std::io::BufRead;

use aws_smithy_types::date_time::{DateTime, Format};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;

use crate::clock;
use crate::records::{kpl, Batch, Position, Record};

/// One input line, as the user writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputLine {
    data: Option<String>,
    data_base64: Option<String>,
    partition_key: Option<String>,
    sequence_number: Option<String>,
    arrival: Option<String>,
}

/// A page of `aws kinesis get-records`, or a Lambda event: other members
/// (`NextShardIterator`, `MillisBehindLatest`, ...) are ignored.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "Records")]
    records: Vec<Value>,
}

/// A record of `aws kinesis get-records`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetRecordsRecord {
    sequence_number: String,
    data: String,
    partition_key: String,
    approximate_arrival_timestamp: Option<Timestamp>,
}

/// The `kinesis` member of a Lambda event's record.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LambdaRecord {
    sequence_number: String,
    data: String,
    partition_key: String,
    approximate_arrival_timestamp: Option<Timestamp>,
}

/// Epoch seconds (Lambda, AWS CLI v1) or an ISO 8601 time (AWS CLI v2).
#[derive(Deserialize)]
#[serde(untagged)]
enum Timestamp {
    Seconds(f64),
    Text(String),
}

/// A record of the input that cannot be turned into a record.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The input could not be read.
    #[error("cannot read the input: {0}")]
    Read(#[from] std::io::Error),
    /// A line is not a record.
    #[error("input line {line}: {reason}")]
    #[allow(missing_docs)] // fields named in the message
    Line { line: usize, reason: String },
    /// A record of a `get-records` output or Lambda event is not one.
    #[error("input record {record} (`Records[{index}]` of document {document}): {reason}")]
    #[allow(missing_docs)] // fields named in the message
    Record { record: usize, document: usize, index: usize, reason: String },
}

/// Reads the records of `input`, in any of the module's shapes.
pub fn read_records(mut input: impl BufRead) -> Result<Batch, InputError> {
    let mut text = String::new();
    input.read_to_string(&mut text)?;
    let mut reader = Reader { records: Batch::default(), last: None, now_ms: clock::unix_ms() };
    let mut documents = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    let is_envelope = matches!(documents.next(), Some(Ok(Value::Object(first))) if first.contains_key("Records"));
    if is_envelope {
        reader.envelopes(&text)?;
    } else {
        reader.lines(&text)?;
    }
    Ok(reader.records)
}

struct Reader {
    records: Batch,
    last: Option<Position>,
    now_ms: u64,
}

impl Reader {
    fn lines(&mut self, text: &str) -> Result<(), InputError> {
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            if line.trim().is_empty() {
                continue;
            }
            let bad = |reason: String| InputError::Line { line: line_no, reason };
            let input: InputLine = serde_json::from_str(line).map_err(|e| bad(format!("not a record object: {e}")))?;
            let data = match (input.data, input.data_base64) {
                (Some(text), None) => text.into_bytes(),
                (None, Some(b64)) => base64(&b64, "data_base64").map_err(bad)?,
                (Some(_), Some(_)) => return Err(bad("give `data` or `data_base64`, not both".into())),
                (None, None) => return Err(bad("missing `data` (UTF-8 text) or `data_base64`".into())),
            };
            let sequence_number = input.sequence_number.unwrap_or_else(|| generated_sequence_number(line_no));
            let arrival = match input.arrival {
                Some(text) => Some(rfc3339_ms(&text).ok_or_else(|| bad(format!("`arrival` {text:?} is not an RFC 3339 time like 2026-01-31T12:00:00Z")))?),
                None => None,
            };
            let partition_key = input.partition_key.unwrap_or_else(|| format!("key-{line_no}"));
            self.push(&data, &partition_key, &sequence_number, arrival).map_err(bad)?;
        }
        Ok(())
    }

    fn envelopes(&mut self, text: &str) -> Result<(), InputError> {
        let mut record = 0;
        for (document, value) in serde_json::Deserializer::from_str(text).into_iter::<Envelope>().enumerate() {
            let document = document + 1;
            let envelope = value.map_err(|e| InputError::Record { record: record + 1, document, index: 0, reason: format!("not a `get-records` output or Lambda event: {e}") })?;
            for (index, value) in envelope.records.into_iter().enumerate() {
                record += 1;
                let bad = |reason: String| InputError::Record { record, document, index, reason };
                if value.get("dynamodb").is_some() {
                    let (data, partition_key, sequence_number, arrival) = stream_record(value).map_err(bad)?;
                    self.push(&data, &partition_key, &sequence_number, arrival).map_err(bad)?;
                    continue;
                }
                let (sequence_number, data, partition_key, arrival) = match value.get("kinesis") {
                    Some(kinesis) => {
                        let r: LambdaRecord = serde_json::from_value(kinesis.clone()).map_err(|e| bad(format!("not a Lambda Kinesis record: {e}")))?;
                        (r.sequence_number, r.data, r.partition_key, r.approximate_arrival_timestamp)
                    }
                    None => {
                        let r: GetRecordsRecord = serde_json::from_value(value).map_err(|e| bad(format!("not a `get-records` record: {e}")))?;
                        (r.sequence_number, r.data, r.partition_key, r.approximate_arrival_timestamp)
                    }
                };
                let data = base64(&data, "Data").map_err(bad)?;
                let arrival = arrival.map(|t| t.millis().ok_or_else(|| bad("`ApproximateArrivalTimestamp` is not epoch seconds or an ISO 8601 time".into()))).transpose()?;
                self.push(&data, &partition_key, &sequence_number, arrival).map_err(bad)?;
            }
        }
        Ok(())
    }

    /// One record, after the one before it in shard order; arrival now when unknown.
    fn push(&mut self, data: &[u8], partition_key: &str, sequence_number: &str, arrival: Option<u64>) -> Result<(), String> {
        let position = Position::new(sequence_number, 0).map_err(|e| e.to_string())?;
        if let Some(previous) = &self.last
            && position <= *previous
        {
            return Err(format!("sequence number {sequence_number} is not after the previous record's {previous}; records must be in shard order"));
        }
        self.last = Some(position);
        let record = Record {
            data,
            partition_key,
            sequence_number,
            sub_sequence_number: None,
            arrival_timestamp_ms: arrival.unwrap_or(self.now_ms),
            explicit_hash_key: None,
        };
        kpl::push(&mut self.records, record, None);
        Ok(())
    }
}

/// A DynamoDB stream record as `run` gives it: the record's data (the
/// fields `run` writes, `ApproximateCreationDateTime` in epoch seconds),
/// partition key, sequence number and arrival.
fn stream_record(mut value: Value) -> Result<(Vec<u8>, String, String, Option<u64>), String> {
    let fields = ["eventID", "eventName", "eventVersion", "eventSource", "awsRegion", "dynamodb", "userIdentity"];
    let Value::Object(record) = &mut value else { return Err("a DynamoDB stream record is a JSON object".into()) };
    record.retain(|name, _| fields.contains(&name.as_str()));
    let stream = record.get_mut("dynamodb").and_then(Value::as_object_mut).ok_or("`dynamodb` is not an object")?;
    let sequence_number = stream.get("SequenceNumber").and_then(Value::as_str).ok_or("`dynamodb.SequenceNumber` is missing")?.to_owned();
    let arrival = match stream.get("ApproximateCreationDateTime") {
        Some(time) => {
            let time: Timestamp = serde_json::from_value(time.clone()).map_err(|e| format!("`ApproximateCreationDateTime`: {e}"))?;
            let ms = time.millis().ok_or("`ApproximateCreationDateTime` is not epoch seconds or an ISO 8601 time")?;
            stream.insert("ApproximateCreationDateTime".into(), serde_json::json!(ms as f64 / 1000.0));
            Some(ms)
        }
        None => None,
    };
    let keys: std::collections::BTreeMap<&String, &Value> = stream.get("Keys").and_then(Value::as_object).ok_or("`dynamodb.Keys` is missing")?.iter().collect();
    let partition_key = keys
        .values()
        .map(|key| match key.as_object().and_then(|typed| typed.values().next()) {
            Some(Value::String(text)) => text.clone(),
            other => other.map(Value::to_string).unwrap_or_default(),
        })
        .collect::<Vec<_>>()
        .join("/");
    // Members sorted by name, as `run` gives them.
    value.sort_all_objects();
    let data = serde_json::to_vec(&value).expect("JSON values serialize");
    Ok((data, partition_key, sequence_number, arrival))
}

impl Timestamp {
    fn millis(&self) -> Option<u64> {
        match self {
            Timestamp::Seconds(seconds) => (*seconds >= 0.0).then(|| (seconds * 1000.0).round() as u64),
            // The CLI writes `+00:00`; RFC 3339 parsers here want `Z`.
            Timestamp::Text(text) => rfc3339_ms(&text.replace("+00:00", "Z")),
        }
    }
}

fn rfc3339_ms(text: &str) -> Option<u64> {
    DateTime::from_str(text, Format::DateTime).ok().and_then(|t| u64::try_from(t.to_millis().ok()?).ok())
}

fn base64(text: &str, field: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD.decode(text.trim()).map_err(|e| format!("`{field}` is not base64: {e}"))
}

/// Shaped like a real Kinesis sequence number (56 digits), increasing with the line.
fn generated_sequence_number(line: usize) -> String {
    format!("49{line:054}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_text_base64_and_generated_fields() {
        let input = concat!(
            r#"{"data": "hello", "partition_key": "p", "sequence_number": "7", "arrival": "2026-01-31T12:00:00Z"}"#, "\n",
            "\n",
            r#"{"data_base64": "AAEC"}"#, "\n",
        );
        let records = read_records(input.as_bytes()).unwrap();
        let records: Vec<_> = records.iter().collect();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].data, b"hello");
        assert_eq!(records[0].partition_key, "p");
        assert_eq!(records[0].arrival_timestamp_ms, 1_769_860_800_000);
        assert_eq!(records[1].data, [0, 1, 2]);
        assert_eq!(records[1].partition_key, "key-3");
        assert_eq!(records[1].sequence_number.len(), 56);
    }

    #[test]
    fn malformed_lines_are_named_by_number() {
        let cases = [
            ("{\"data\": \"a\"}\nnot json\n", 2, "not a record object"),
            ("{\"partition_key\": \"k\"}\n", 1, "missing `data`"),
            ("{\"data_base64\": \"***\"}\n", 1, "not base64"),
            ("{\"data\": \"a\", \"arrival\": \"yesterday\"}\n", 1, "RFC 3339"),
            ("{\"data\": \"a\", \"sequence_number\": \"abc\"}\n", 1, "not a sequence number"),
            ("{\"data\": \"a\", \"sequence_number\": \"9\"}\n{\"data\": \"b\", \"sequence_number\": \"8\"}\n", 2, "shard order"),
            ("{\"data\": \"a\", \"colour\": \"red\"}\n", 1, "unknown field"),
        ];
        for (input, line, words) in cases {
            match read_records(input.as_bytes()) {
                Err(InputError::Line { line: got, reason }) => {
                    assert_eq!(got, line, "{input:?}");
                    assert!(reason.contains(words), "{reason:?} should mention {words:?}");
                }
                other => panic!("{input:?}: expected a line error, got {other:?}"),
            }
        }
    }

    #[test]
    fn reads_get_records_pages_and_lambda_events_by_their_shape() {
        // Two pages of AWS CLI v2 output, pretty-printed, one after the other.
        let pages = r#"{
            "Records": [
                {"SequenceNumber": "49590338271490256608559692538361571095921575989136588898", "ApproximateArrivalTimestamp": "2026-01-31T12:00:00.250000+00:00",
                 "Data": "aGVsbG8=", "PartitionKey": "user-1", "EncryptionType": "NONE"}
            ],
            "NextShardIterator": "AAAA", "MillisBehindLatest": 0
        }
        {"Records": [{"SequenceNumber": "49590338271490256608559692538361571095921575989136588899", "ApproximateArrivalTimestamp": 1769860801.5,
                      "Data": "AAEC", "PartitionKey": "user-2"}]}"#;
        let records = read_records(pages.as_bytes()).unwrap();
        let records: Vec<_> = records.iter().collect();
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].data, records[0].partition_key, records[0].arrival_timestamp_ms), (&b"hello"[..], "user-1", 1_769_860_800_250));
        assert_eq!((records[1].data, records[1].arrival_timestamp_ms), (&[0u8, 1, 2][..], 1_769_860_801_500));
        assert_eq!(records[1].sequence_number, "49590338271490256608559692538361571095921575989136588899");

        let lambda = r#"{"Records": [{"kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": "1", "sequenceNumber": "49590338271490256608559692538361571095921575989136588898",
            "data": "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==", "approximateArrivalTimestamp": 1545084650.987},
            "eventSource": "aws:kinesis", "eventVersion": "1.0", "eventID": "shardId-000000000006:49590338271490256608559692538361571095921575989136588898",
            "eventName": "aws:kinesis:record", "awsRegion": "us-east-2"}]}"#;
        let records = read_records(lambda.as_bytes()).unwrap();
        let record = records.iter().next().unwrap();
        assert_eq!((record.data, record.partition_key, record.arrival_timestamp_ms), (&b"Hello, this is a test."[..], "1", 1_545_084_650_987));
    }

    #[test]
    fn reads_dynamodb_stream_records_of_a_lambda_event_and_of_get_records() {
        let lambda = r#"{"Records": [{"eventID": "1", "eventName": "INSERT", "eventVersion": "1.0", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "dynamodb": {"ApproximateCreationDateTime": 1700000000, "Keys": {"sk": {"N": "3"}, "pk": {"S": "account-1"}},
                         "NewImage": {"pk": {"S": "account-1"}, "sk": {"N": "3"}, "amount": {"N": "12"}},
                         "SequenceNumber": "111", "SizeBytes": 26, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-12-01T00:00:00.000"}]}"#;
        let cli = r#"{"Records": [{"eventID": "2", "eventName": "REMOVE", "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "dynamodb": {"ApproximateCreationDateTime": "2023-11-14T22:13:21+00:00", "Keys": {"pk": {"S": "account-1"}, "sk": {"N": "3"}},
                         "OldImage": {"amount": {"N": "12"}}, "SequenceNumber": "112", "SizeBytes": 20, "StreamViewType": "NEW_AND_OLD_IMAGES"}}],
            "NextShardIterator": "arn:..."}"#;
        let records = read_records(format!("{lambda}\n{cli}").as_bytes()).unwrap();
        let records: Vec<_> = records.iter().collect();
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].partition_key, records[0].sequence_number, records[0].arrival_timestamp_ms), ("account-1/3", "111", 1_700_000_000_000));
        let first: Value = serde_json::from_slice(records[0].data).unwrap();
        assert_eq!(first["dynamodb"]["NewImage"]["amount"], serde_json::json!({"N": "12"}));
        assert!(first.get("eventSourceARN").is_none(), "only the fields `run` gives: {first}");
        let second: Value = serde_json::from_slice(records[1].data).unwrap();
        assert_eq!((second["eventName"].as_str(), records[1].arrival_timestamp_ms), (Some("REMOVE"), 1_700_000_001_000));
        assert_eq!(second["dynamodb"]["ApproximateCreationDateTime"], 1_700_000_001.0);
    }

    #[test]
    fn a_bad_record_of_a_get_records_output_is_named_by_its_place() {
        let cases = [
            (r#"{"Records": [{"SequenceNumber": "1", "Data": "AA==", "PartitionKey": "k"}, {"SequenceNumber": "2", "Data": "***", "PartitionKey": "k"}]}"#, "input record 2 (`Records[1]` of document 1): `Data` is not base64"),
            (r#"{"Records": [{"SequenceNumber": "1", "PartitionKey": "k"}]}"#, "not a `get-records` record: missing field `Data`"),
            (r#"{"Records": [{"kinesis": {"sequenceNumber": "1", "data": "AA=="}}]}"#, "not a Lambda Kinesis record: missing field `partitionKey`"),
            (r#"{"Records": [{"SequenceNumber": "2", "Data": "AA==", "PartitionKey": "k"}]} {"Records": [{"SequenceNumber": "1", "Data": "AA==", "PartitionKey": "k"}]}"#, "of document 2): sequence number 1 is not after"),
        ];
        for (input, words) in cases {
            let error = read_records(input.as_bytes()).unwrap_err().to_string();
            assert!(error.contains(words), "{error:?} should say {words:?}");
        }
    }
}
