//! A DynamoDB table target: each record's data is a JSON object, put as an
//! item (its fields as attributes: strings `S`, numbers `N`, booleans
//! `BOOL`, null `NULL`, arrays `L`, objects `M`). The object must hold the
//! table's key attributes. Items go in BatchWriteItem calls of at most 25;
//! unprocessed items are sent again with a backoff. Two items with the same
//! key are never in one call: the later one goes in the next, so the last
//! one sent is the one that stays.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use aws_sdk_dynamodb::Client;

use super::record::OutRecord;
use super::target::{retrying, Attempt, Retries, Target, WriteFuture};
use crate::aws::{AwsError, Service};

/// Most items one BatchWriteItem call takes.
const MAX_ITEMS: usize = 25;

/// BatchWriteItem to one table.
pub struct DynamoDbTarget {
    client: Client,
    table: String,
    /// The table's key attributes, from DescribeTable.
    key: Vec<String>,
}

impl DynamoDbTarget {
    /// Writes to `table`, reading its key attributes first; the error names
    /// the table when it cannot be described.
    pub async fn connect(client: Client, table: String) -> Result<Self, AwsError> {
        let described = client
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(Service::DynamoDb, "DescribeTable", &table, e))?;
        let key = described.table().map(|t| t.key_schema().iter().map(|k| k.attribute_name().to_owned()).collect()).unwrap_or_default();
        Ok(Self { client, table, key })
    }

    /// One call: the requests DynamoDB left unprocessed.
    async fn put(&self, requests: &[WriteRequest]) -> Attempt<Vec<WriteRequest>> {
        let call = self.client.batch_write_item().request_items(&self.table, requests.to_vec());
        match call.send().await {
            Ok(output) => Attempt::Done(output.unprocessed_items().and_then(|u| u.get(&self.table)).cloned().unwrap_or_default()),
            Err(e) => Attempt::Again(AwsError::from_sdk(Service::DynamoDb, "BatchWriteItem", &self.table, e).to_string()),
        }
    }
}

/// A JSON value as a DynamoDB attribute.
fn attribute(value: serde_json::Value) -> AttributeValue {
    use serde_json::Value;
    match value {
        Value::Null => AttributeValue::Null(true),
        Value::Bool(b) => AttributeValue::Bool(b),
        Value::Number(n) => AttributeValue::N(n.to_string()),
        Value::String(s) => AttributeValue::S(s),
        Value::Array(items) => AttributeValue::L(items.into_iter().map(attribute).collect()),
        Value::Object(fields) => AttributeValue::M(fields.into_iter().map(|(k, v)| (k, attribute(v))).collect()),
    }
}

/// The record's data as an item, or why it is not one.
fn item(record: &OutRecord<'_>) -> Result<HashMap<String, AttributeValue>, String> {
    match serde_json::from_slice(record.data) {
        Ok(serde_json::Value::Object(fields)) => Ok(fields.into_iter().map(|(k, v)| (k, attribute(v))).collect()),
        Ok(_) => Err("a DynamoDB output's data must be a JSON object (an item); this is other JSON".into()),
        Err(e) => Err(format!("a DynamoDB output's data must be a JSON object (an item): {e}")),
    }
}

impl Target for DynamoDbTarget {
    fn check(&self, record: &OutRecord<'_>) -> Result<(), String> {
        let item = item(record)?;
        match self.key.iter().find(|k| !item.contains_key(*k)) {
            Some(missing) => Err(format!("the item has no `{missing}`, a key attribute of table `{}`", self.table)),
            None => Ok(()),
        }
    }

    fn write<'a>(&'a self, records: &'a [OutRecord<'a>], retries: &'a Retries) -> WriteFuture<'a> {
        Box::pin(async move {
            let target = format!("dynamodb:{}", self.table);
            // Calls of at most MAX_ITEMS, none with two items of one key.
            let mut calls: Vec<(Vec<WriteRequest>, HashSet<String>)> = Vec::new();
            for record in records {
                let item = item(record).map_err(|e| format!("{target}: {e}"))?;
                let key: String = self.key.iter().map(|k| format!("{:?}", item.get(k))).collect();
                if !calls.last().is_some_and(|(requests, keys)| requests.len() < MAX_ITEMS && !keys.contains(&key)) {
                    calls.push((Vec::new(), HashSet::new()));
                }
                let (requests, keys) = calls.last_mut().expect("just pushed");
                let put = PutRequest::builder().set_item(Some(item)).build().expect("the item is set");
                requests.push(WriteRequest::builder().put_request(put).build());
                keys.insert(key);
            }
            for (mut requests, _) in calls {
                while !requests.is_empty() {
                    let unprocessed = retrying(&target, retries, || self.put(&requests)).await?;
                    retries.fetch_add(unprocessed.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    if !unprocessed.is_empty() {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    requests = unprocessed;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_objects_become_items_and_anything_else_is_refused() {
        let record = |data: &'static str| OutRecord { data: data.as_bytes(), partition_key: "k", explicit_hash_key: None };
        let item = item(&record(r#"{"key":"a","total":3,"tags":["x"],"ok":true,"none":null}"#)).unwrap();
        assert_eq!(item["key"], AttributeValue::S("a".into()));
        assert_eq!(item["total"], AttributeValue::N("3".into()));
        assert_eq!(item["tags"], AttributeValue::L(vec![AttributeValue::S("x".into())]));
        assert_eq!(item["ok"], AttributeValue::Bool(true));
        assert_eq!(item["none"], AttributeValue::Null(true));
        assert!(super::item(&record("[1]")).unwrap_err().contains("must be a JSON object"));
        assert!(super::item(&record("not json")).unwrap_err().contains("must be a JSON object"));
    }
}
