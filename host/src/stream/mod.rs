//! A stream's shards as Kinesis lists them: what the shard graph, the
//! reader (a shard past retention) and the worker's start (the stream
//! exists) all ask; and the streams an application reads ([`streams`]).

pub mod streams;

use std::collections::BTreeSet;

use aws_sdk_kinesis::types::ShardFilter;

use crate::aws::{AwsError, Service};
pub use streams::{AppStream, SourceKind, StreamKind, StreamSpec, Streams};

/// One shard as ListShards describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shard {
    /// The shard id.
    pub id: String,
    /// `ParentShardId` and `AdjacentParentShardId`.
    pub parents: BTreeSet<String>,
    /// The first hash key of the shard.
    pub starting_hash_key: String,
    /// The last hash key of the shard.
    pub ending_hash_key: String,
    /// Whether the shard has an ending sequence number (no more writes).
    pub closed: bool,
}

/// Every shard of `stream`, following ListShards' pages.
pub async fn list_shards(kinesis: &aws_sdk_kinesis::Client, stream: &str) -> Result<Vec<Shard>, AwsError> {
    let mut shards = Vec::new();
    let mut next_token: Option<String> = None;
    loop {
        // A page token carries the stream: the name may not be sent with it.
        let request = match next_token.take() {
            Some(token) => kinesis.list_shards().next_token(token),
            None => kinesis.list_shards().stream_name(stream).shard_filter(
                ShardFilter::builder().r#type(aws_sdk_kinesis::types::ShardFilterType::FromTrimHorizon).build().expect("type set"),
            ),
        };
        let page = request.send().await.map_err(|e| AwsError::from_sdk(Service::Kinesis, "ListShards", stream, e))?;
        for shard in page.shards() {
            let parents = [shard.parent_shard_id(), shard.adjacent_parent_shard_id()].into_iter().flatten().map(str::to_owned).collect();
            let range = shard.hash_key_range();
            shards.push(Shard {
                id: shard.shard_id().to_owned(),
                parents,
                starting_hash_key: range.map(|r| r.starting_hash_key().to_owned()).unwrap_or_default(),
                ending_hash_key: range.map(|r| r.ending_hash_key().to_owned()).unwrap_or_default(),
                closed: shard.sequence_number_range().is_some_and(|r| r.ending_sequence_number().is_some()),
            });
        }
        match page.next_token() {
            Some(token) => next_token = Some(token.to_owned()),
            None => return Ok(shards),
        }
    }
}
