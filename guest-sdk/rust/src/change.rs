//! DynamoDB stream records (feature `json`): when kcl-host reads a table's
//! stream (`--stream <DynamoDB stream ARN>` or `--dynamodb-table T`), each
//! record's data is the change in the JSON that Lambda's DynamoDB events
//! carry. [`Record::change`] reads it, with the item's attributes as plain
//! values: a number is a JSON number, a string set a list, and so on.
//!
//! ```no_run
//! # fn f(record: kcl_guest::Record<'_>) -> Result<(), kcl_guest::ChangeError> {
//! let change = record.change()?;
//! let amount = change.new("amount").and_then(|v| v.as_i64()).unwrap_or(0);
//! # Ok(()) }
//! ```

use std::fmt;

use serde_json::{Map, Number, Value};

use crate::Record;

/// What happened to the item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventName {
    /// A new item was written.
    Insert,
    /// An item was changed.
    Modify,
    /// An item was deleted (by a request, or by TTL).
    Remove,
}

/// One change of one item.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// INSERT, MODIFY or REMOVE.
    pub event_name: EventName,
    /// The item's primary key attributes.
    pub keys: Map<String, Value>,
    /// The item after the change (NEW_IMAGE and NEW_AND_OLD_IMAGES streams; not on REMOVE).
    pub new_image: Option<Map<String, Value>>,
    /// The item before the change (OLD_IMAGE and NEW_AND_OLD_IMAGES streams; not on INSERT).
    pub old_image: Option<Map<String, Value>>,
    /// The stream record's sequence number (also the record's).
    pub sequence_number: String,
    /// When DynamoDB made the change, in milliseconds since the epoch.
    pub approximate_creation_ms: u64,
    /// The stream record's size in bytes.
    pub size_bytes: u64,
}

impl Change {
    /// `attribute` of the item after the change.
    pub fn new(&self, attribute: &str) -> Option<&Value> {
        self.new_image.as_ref()?.get(attribute)
    }

    /// `attribute` of the item before the change.
    pub fn old(&self, attribute: &str) -> Option<&Value> {
        self.old_image.as_ref()?.get(attribute)
    }
}

/// A record that is not a DynamoDB stream record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeError(String);

impl fmt::Display for ChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a DynamoDB stream record: {}", self.0)
    }
}

impl std::error::Error for ChangeError {}

impl Record<'_> {
    /// The change this record carries, when it was read from a DynamoDB stream.
    pub fn change(&self) -> Result<Change, ChangeError> {
        let event: Value = serde_json::from_slice(self.data).map_err(|e| ChangeError(format!("its data is not JSON: {e}")))?;
        let stream = event.get("dynamodb").and_then(Value::as_object).ok_or_else(|| ChangeError("no `dynamodb` object".into()))?;
        let event_name = match event.get("eventName").and_then(Value::as_str) {
            Some("INSERT") => EventName::Insert,
            Some("MODIFY") => EventName::Modify,
            Some("REMOVE") => EventName::Remove,
            other => return Err(ChangeError(format!("eventName {other:?}"))),
        };
        let image = |name: &str| stream.get(name).and_then(Value::as_object).map(item);
        let seconds = stream.get("ApproximateCreationDateTime").and_then(Value::as_f64).unwrap_or(0.0);
        Ok(Change {
            event_name,
            keys: image("Keys").unwrap_or_default(),
            new_image: image("NewImage"),
            old_image: image("OldImage"),
            sequence_number: stream.get("SequenceNumber").and_then(Value::as_str).unwrap_or(self.sequence_number).to_owned(),
            approximate_creation_ms: (seconds * 1000.0).round() as u64,
            size_bytes: stream.get("SizeBytes").and_then(Value::as_u64).unwrap_or(0),
        })
    }
}

/// An item in DynamoDB JSON as plain values.
fn item(attributes: &Map<String, Value>) -> Map<String, Value> {
    attributes.iter().map(|(name, value)| (name.clone(), plain(value))).collect()
}

/// `{"N": "12"}` → `12`, `{"SS": ["a"]}` → `["a"]`, `{"M": {...}}` → `{...}`;
/// binary stays base64 text.
pub fn plain(attribute: &Value) -> Value {
    let Some((kind, value)) = attribute.as_object().and_then(|o| o.iter().next()) else { return Value::Null };
    let list = |f: fn(&Value) -> Value| Value::Array(value.as_array().map(|items| items.iter().map(f).collect()).unwrap_or_default());
    match kind.as_str() {
        "N" => number(value),
        "NS" => list(number),
        "L" => list(plain),
        "M" => Value::Object(value.as_object().map(item).unwrap_or_default()),
        "NULL" => Value::Null,
        // S, B (base64), BOOL, SS, BS: already plain.
        _ => value.clone(),
    }
}

/// A DynamoDB number (text, up to 38 digits) as a JSON number: an integer
/// when it is one that fits, else the nearest float.
fn number(text: &Value) -> Value {
    let text = text.as_str().unwrap_or_default();
    if let Ok(integer) = text.parse::<i64>() {
        return Value::from(integer);
    }
    text.parse::<f64>().ok().and_then(Number::from_f64).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::UNIX_EPOCH;

    fn record(data: &[u8]) -> Record<'_> {
        Record {
            data,
            partition_key: "user-7",
            sequence_number: "11",
            sub_sequence_number: None,
            approximate_arrival: UNIX_EPOCH,
            explicit_hash_key: None,
        }
    }

    #[test]
    fn a_modify_gives_both_images_as_plain_values() {
        let data = json!({
            "eventName": "MODIFY",
            "dynamodb": {
                "ApproximateCreationDateTime": 1_700_000_000.5,
                "Keys": {"pk": {"S": "user-7"}},
                "NewImage": {"pk": {"S": "user-7"}, "amount": {"N": "12"}, "rate": {"N": "0.5"}, "tags": {"SS": ["a", "b"]},
                             "sizes": {"NS": ["1", "2"]}, "nested": {"M": {"on": {"BOOL": true}, "gone": {"NULL": true}}},
                             "list": {"L": [{"S": "x"}, {"N": "3"}]}, "raw": {"B": "AAE="}},
                "OldImage": {"pk": {"S": "user-7"}, "amount": {"N": "5"}},
                "SequenceNumber": "1100000000017454423009",
                "SizeBytes": 80
            }
        })
        .to_string();
        let change = record(data.as_bytes()).change().unwrap();
        assert_eq!(change.event_name, EventName::Modify);
        assert_eq!(change.keys["pk"], "user-7");
        assert_eq!(change.new("amount"), Some(&json!(12)));
        assert_eq!(change.old("amount"), Some(&json!(5)));
        assert_eq!(change.new("rate"), Some(&json!(0.5)));
        assert_eq!(change.new("tags"), Some(&json!(["a", "b"])));
        assert_eq!(change.new("sizes"), Some(&json!([1, 2])));
        assert_eq!(change.new("nested"), Some(&json!({"on": true, "gone": null})));
        assert_eq!(change.new("list"), Some(&json!(["x", 3])));
        assert_eq!(change.new("raw"), Some(&json!("AAE=")));
        assert_eq!((change.sequence_number.as_str(), change.approximate_creation_ms, change.size_bytes), ("1100000000017454423009", 1_700_000_000_500, 80));
    }

    #[test]
    fn a_kinesis_record_is_not_a_change() {
        assert!(record(b"hello").change().unwrap_err().to_string().contains("not JSON"));
        assert!(record(br#"{"a": 1}"#).change().unwrap_err().to_string().contains("no `dynamodb`"));
    }
}
