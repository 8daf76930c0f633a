//! A DynamoDB stream record as a processor receives it: the record's data
//! is the change in the JSON shape Lambda's DynamoDB events, `aws
//! dynamodbstreams get-records` and the DynamoDB Streams Kinesis Adapter all
//! use (`eventName`, `dynamodb.Keys`, `NewImage`, `OldImage` in DynamoDB
//! JSON, ...), and its partition key is the item's partition key value, so
//! `--parallelism` keeps each item's changes in order on one instance.

use std::collections::HashMap;

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record as StreamRecord};
use base64::Engine as _;
use serde_json::{json, Map, Value};

/// One change, ready for a [`crate::records::Batch`].
#[derive(Debug, PartialEq)]
pub struct Change {
    /// The change as JSON (see the module's docs).
    pub data: Vec<u8>,
    /// The item's partition key value as text: a string as is, a number as
    /// written, binary in base64.
    pub partition_key: String,
    /// The stream record's sequence number.
    pub sequence_number: String,
    /// `ApproximateCreationDateTime`, in milliseconds since the epoch.
    pub created_ms: u64,
}

/// The change `record` describes; `hash_key` names the table's partition
/// key attribute. `None` for a record without a sequence number (which no
/// checkpoint could name).
pub fn change(record: &StreamRecord, hash_key: &str) -> Option<Change> {
    let stream = record.dynamodb.as_ref()?;
    let sequence_number = stream.sequence_number.clone()?;
    let created_ms = stream.approximate_creation_date_time.and_then(|t| t.to_millis().ok()).map_or(0, |ms| ms.max(0) as u64);
    let mut dynamodb = Map::new();
    // Seconds, as Lambda's events give them.
    dynamodb.insert("ApproximateCreationDateTime".into(), json!(created_ms as f64 / 1000.0));
    for (name, image) in [("Keys", &stream.keys), ("NewImage", &stream.new_image), ("OldImage", &stream.old_image)] {
        if let Some(image) = image {
            dynamodb.insert(name.into(), item(image));
        }
    }
    dynamodb.insert("SequenceNumber".into(), json!(sequence_number));
    if let Some(size) = stream.size_bytes {
        dynamodb.insert("SizeBytes".into(), json!(size));
    }
    if let Some(view) = &stream.stream_view_type {
        dynamodb.insert("StreamViewType".into(), json!(view.as_str()));
    }
    let mut event = Map::new();
    let text = |field: &Option<String>| field.as_deref().map(|s| json!(s));
    for (name, value) in [
        ("eventID", text(&record.event_id)),
        ("eventName", record.event_name.as_ref().map(|e| json!(e.as_str()))),
        ("eventVersion", text(&record.event_version)),
        ("eventSource", text(&record.event_source)),
        ("awsRegion", text(&record.aws_region)),
    ] {
        if let Some(value) = value {
            event.insert(name.into(), value);
        }
    }
    event.insert("dynamodb".into(), Value::Object(dynamodb));
    if let Some(identity) = &record.user_identity {
        // TTL deletions: {"type": "Service", "principalId": "dynamodb.amazonaws.com"}.
        event.insert("userIdentity".into(), json!({"type": identity.r#type, "principalId": identity.principal_id}));
    }
    let partition_key = stream.keys.as_ref().and_then(|keys| keys.get(hash_key)).map(key_text).unwrap_or_default();
    // Members sorted by name: the same change gives the same bytes (as `replay` gives them).
    let mut event = Value::Object(event);
    event.sort_all_objects();
    let data = serde_json::to_vec(&event).expect("JSON values serialize");
    Some(Change { data, partition_key, sequence_number, created_ms })
}

/// An item (or its keys) in DynamoDB JSON.
fn item(attributes: &HashMap<String, AttributeValue>) -> Value {
    Value::Object(attributes.iter().map(|(name, value)| (name.clone(), attribute(value))).collect())
}

/// One attribute in DynamoDB JSON: `{"S": "..."}`, `{"N": "12"}`, ...
fn attribute(value: &AttributeValue) -> Value {
    let base64 = |blob: &aws_smithy_types::Blob| json!(base64::engine::general_purpose::STANDARD.encode(blob.as_ref()));
    match value {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": base64(b) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(n) => json!({ "NULL": n }),
        AttributeValue::Ss(set) => json!({ "SS": set }),
        AttributeValue::Ns(set) => json!({ "NS": set }),
        AttributeValue::Bs(set) => json!({ "BS": set.iter().map(base64).collect::<Vec<_>>() }),
        AttributeValue::L(list) => json!({ "L": list.iter().map(attribute).collect::<Vec<_>>() }),
        AttributeValue::M(map) => json!({ "M": item(map) }),
        // A type newer than this SDK: kept visible rather than dropped.
        _ => json!({ "UNKNOWN": null }),
    }
}

/// A key attribute as text (keys are strings, numbers or binary).
fn key_text(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) | AttributeValue::N(s) => s.clone(),
        AttributeValue::B(b) => base64::engine::general_purpose::STANDARD.encode(b.as_ref()),
        other => attribute(other).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodbstreams::types::{OperationType, StreamRecord as Inner, StreamViewType};
    use aws_smithy_types::{Blob, DateTime};

    #[test]
    fn a_modify_carries_both_images_in_dynamodb_json_and_its_partition_key_as_text() {
        let keys = HashMap::from([("pk".to_owned(), AttributeValue::S("user-7".into())), ("sk".to_owned(), AttributeValue::N("3".into()))]);
        let mut new = keys.clone();
        new.insert("amount".into(), AttributeValue::N("12.5".into()));
        new.insert("tags".into(), AttributeValue::Ss(vec!["a".into()]));
        new.insert("raw".into(), AttributeValue::B(Blob::new(b"\x00\x01")));
        new.insert("nested".into(), AttributeValue::M(HashMap::from([("on".to_owned(), AttributeValue::Bool(true))])));
        let mut old = keys.clone();
        old.insert("amount".into(), AttributeValue::N("2".into()));
        let record = StreamRecord::builder()
            .event_id("e1")
            .event_name(OperationType::Modify)
            .aws_region("us-east-1")
            .dynamodb(
                Inner::builder()
                    .approximate_creation_date_time(DateTime::from_millis(1_700_000_000_500))
                    .set_keys(Some(keys))
                    .set_new_image(Some(new))
                    .set_old_image(Some(old))
                    .sequence_number("1100000000017454423009")
                    .size_bytes(80)
                    .stream_view_type(StreamViewType::NewAndOldImages)
                    .build(),
            )
            .build();
        let change = change(&record, "pk").unwrap();
        assert_eq!(change.partition_key, "user-7");
        assert_eq!(change.sequence_number, "1100000000017454423009");
        assert_eq!(change.created_ms, 1_700_000_000_500);
        let json: Value = serde_json::from_slice(&change.data).unwrap();
        assert_eq!(json["eventName"], "MODIFY");
        assert_eq!(json["dynamodb"]["ApproximateCreationDateTime"], 1_700_000_000.5);
        assert_eq!(json["dynamodb"]["Keys"], json!({"pk": {"S": "user-7"}, "sk": {"N": "3"}}));
        assert_eq!(json["dynamodb"]["NewImage"]["amount"], json!({"N": "12.5"}));
        assert_eq!(json["dynamodb"]["NewImage"]["raw"], json!({"B": "AAE="}));
        assert_eq!(json["dynamodb"]["NewImage"]["tags"], json!({"SS": ["a"]}));
        assert_eq!(json["dynamodb"]["NewImage"]["nested"], json!({"M": {"on": {"BOOL": true}}}));
        assert_eq!(json["dynamodb"]["OldImage"]["amount"], json!({"N": "2"}));
        assert_eq!(json["dynamodb"]["StreamViewType"], "NEW_AND_OLD_IMAGES");
    }

    #[test]
    fn a_record_without_a_sequence_number_is_not_a_change() {
        let record = StreamRecord::builder().dynamodb(Inner::builder().build()).build();
        assert_eq!(change(&record, "pk"), None);
    }
}
