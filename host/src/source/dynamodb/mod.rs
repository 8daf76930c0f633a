//! DynamoDB Streams as a source: a table's stream described (its shards and
//! their parents, the table's partition key), its shards read
//! ([`reader::StreamReader`]), and its records turned into changes
//! ([`record`]).
//!
//! A DynamoDB stream's shards close and are replaced by children every few
//! hours, for as long as the stream is on; a closed shard is kept 24 hours.
//! The shard graph, the leases and `SHARD_END` are the Kinesis ones: a
//! stream's shard ids are lease keys as the DynamoDB Streams Kinesis
//! Adapter writes them.

mod images;
pub mod reader;
pub mod record;
#[cfg(test)]
mod tests;

use aws_sdk_dynamodbstreams::types::{KeyType, StreamStatus};
use aws_sdk_dynamodbstreams::Client;

pub use images::Images;

use crate::aws::{AwsError, Service};
use crate::stream::Shard;

/// A DynamoDB stream as DescribeStream tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamFacts {
    /// `arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>`.
    pub arn: String,
    /// The table whose changes it carries.
    pub table: String,
    /// Which images its records carry: KEYS_ONLY, NEW_IMAGE, OLD_IMAGE or NEW_AND_OLD_IMAGES.
    pub view_type: String,
    /// The table's partition key attribute: records are routed by its value.
    pub hash_key: String,
    /// When the stream was turned on, in seconds since the epoch.
    pub created_epoch: u64,
}

/// Whether `name` is a DynamoDB stream's ARN (rather than a Kinesis stream's name).
pub fn is_stream_arn(name: &str) -> bool {
    name.starts_with("arn:") && name.split(':').nth(2) == Some("dynamodb")
}

/// The ARN of `table`'s current stream; an error that says what to do when
/// the table has none (or it is off).
pub async fn table_stream(client: &Client, table: &str) -> Result<String, AwsError> {
    let listed = client.list_streams().table_name(table).send().await.map_err(|e| match e.as_service_error() {
        Some(s) if s.is_resource_not_found_exception() => no_stream(table, "does not exist (or is in another account or region)"),
        _ => AwsError::from_sdk(Service::DynamoDbStreams, "ListStreams", table, e),
    })?;
    // Labels are creation times: the greatest is the current stream.
    let Some(newest) = listed.streams().iter().filter_map(|s| s.stream_arn()).max_by_key(|arn| arn.rsplit('/').next().unwrap_or_default().to_owned())
    else {
        return Err(no_stream(table, "has no stream; turn one on (StreamSpecification: StreamEnabled, with StreamViewType NEW_AND_OLD_IMAGES to see both images)"));
    };
    let status = client.describe_stream().stream_arn(newest).limit(1).send().await;
    let status = status.map_err(|e| AwsError::from_sdk(Service::DynamoDbStreams, "DescribeStream", newest, e))?;
    match status.stream_description().and_then(|d| d.stream_status()) {
        Some(StreamStatus::Disabled | StreamStatus::Disabling) => Err(no_stream(
            table,
            &format!("has its stream turned off (the last one, `{newest}`); turn it on again, or pass that ARN as --stream to read what it kept"),
        )),
        _ => Ok(newest.to_owned()),
    }
}

fn no_stream(table: &str, why: &str) -> AwsError {
    AwsError::Service { operation: "ListStreams", code: "NoStream".into(), message: format!("DynamoDB table `{table}` {why}") }
}

/// What `arn` is, and every shard it lists (DescribeStream, paged).
pub async fn describe(client: &Client, arn: &str) -> Result<(StreamFacts, Vec<Shard>), AwsError> {
    let mut shards = Vec::new();
    let mut facts = None;
    let mut after: Option<String> = None;
    loop {
        let page = client
            .describe_stream()
            .stream_arn(arn)
            .set_exclusive_start_shard_id(after.take())
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(Service::DynamoDbStreams, "DescribeStream", arn, e))?;
        let Some(description) = page.stream_description else {
            return Err(AwsError::DynamoDbStreamNotFound(arn.to_owned()));
        };
        if facts.is_none() {
            let hash_key = description.key_schema().iter().find(|k| k.key_type == KeyType::Hash).map(|k| k.attribute_name.clone());
            facts = Some(StreamFacts {
                arn: arn.to_owned(),
                table: description.table_name().unwrap_or_default().to_owned(),
                view_type: description.stream_view_type().map(|v| v.as_str().to_owned()).unwrap_or_default(),
                hash_key: hash_key.unwrap_or_default(),
                created_epoch: description.creation_request_date_time().map_or(0, |t| t.secs().max(0) as u64),
            });
        }
        for shard in description.shards() {
            let Some(id) = shard.shard_id() else { continue };
            shards.push(Shard {
                id: id.to_owned(),
                parents: shard.parent_shard_id().map(str::to_owned).into_iter().collect(),
                starting_hash_key: String::new(),
                ending_hash_key: String::new(),
                closed: shard.sequence_number_range().is_some_and(|r| r.ending_sequence_number().is_some()),
            });
        }
        match description.last_evaluated_shard_id {
            Some(last) => after = Some(last),
            None => return Ok((facts.expect("set from the first page"), shards)),
        }
    }
}

/// The shards of `arn`, parents with each.
pub async fn list_shards(client: &Client, arn: &str) -> Result<Vec<Shard>, AwsError> {
    Ok(describe(client, arn).await?.1)
}
