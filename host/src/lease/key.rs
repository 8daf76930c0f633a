//! A lease's key (`leaseKey`): the shard it leases, and — in an application
//! that reads several streams — the stream too.
//!
//! Java KCL writes a single-stream application's keys as the shard id
//! (`shardId-000000000001`) and a multi-stream application's as
//! `account:stream:creationEpoch:shardId`
//! (`123456789012:orders:1700000000:shardId-000000000001`). A key is kept
//! as the table has it, so a row written by either reads and writes back
//! unchanged; [`LeaseKey::shard_id`] and [`LeaseKey::stream`] read its parts.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

/// The stream part of a multi-stream lease key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamIdentifier {
    /// The AWS account id that owns the stream.
    pub account: String,
    /// The stream's name.
    pub name: String,
    /// When the stream was created, in seconds since the Unix epoch: a
    /// stream deleted and made again under the same name is another stream.
    pub creation_epoch: u64,
}

impl fmt::Display for StreamIdentifier {
    /// `account:name:creationEpoch`, as Java KCL serializes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.account, self.name, self.creation_epoch)
    }
}

/// A lease's key, as the lease table has it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey(String);

impl LeaseKey {
    /// The key of `shard_id` in a single-stream application: the shard id.
    pub fn shard(shard_id: impl Into<String>) -> Self {
        Self(shard_id.into())
    }

    /// The key of `shard_id` of `stream` in a multi-stream application.
    pub fn multi_stream(stream: &StreamIdentifier, shard_id: &str) -> Self {
        Self(format!("{stream}:{shard_id}"))
    }

    /// The shard this key leases.
    pub fn shard_id(&self) -> &str {
        self.0.rsplit(':').next().unwrap_or(&self.0)
    }

    /// The key of another shard of this key's stream: the shard id alone in
    /// a single-stream table, `account:stream:creationEpoch:shard` in a
    /// multi-stream one. A key given whole (with its stream) stays as it is.
    pub fn sibling(&self, shard_id: &str) -> Self {
        match (self.stream_part(), shard_id.contains(':')) {
            (Some(stream), false) => Self(format!("{stream}:{shard_id}")),
            _ => Self(shard_id.to_owned()),
        }
    }

    /// The stream part as the key has it (`account:stream:creationEpoch`);
    /// `None` for a shard id alone.
    pub fn stream_part(&self) -> Option<&str> {
        self.0.rsplit_once(':').map(|(stream, _)| stream)
    }

    /// The stream, for a multi-stream key; `None` for a shard id alone.
    pub fn stream(&self) -> Option<StreamIdentifier> {
        let mut parts = self.0.splitn(4, ':');
        let (account, name, epoch, _shard) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        Some(StreamIdentifier { account: account.to_owned(), name: name.to_owned(), creation_epoch: epoch.parse().ok()? })
    }

    /// The key as the table has it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A key is read wherever its text is (logs, maps keyed by text, rows).
impl Deref for LeaseKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by lease key are looked up by the key's text.
impl Borrow<str> for LeaseKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for LeaseKey {
    fn from(key: String) -> Self {
        Self(key)
    }
}

impl From<&str> for LeaseKey {
    fn from(key: &str) -> Self {
        Self(key.to_owned())
    }
}

impl From<&String> for LeaseKey {
    fn from(key: &String) -> Self {
        Self(key.clone())
    }
}

impl From<LeaseKey> for String {
    fn from(key: LeaseKey) -> Self {
        key.0
    }
}

impl PartialEq<str> for LeaseKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for LeaseKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for LeaseKey {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_id_alone_names_no_stream() {
        let key = LeaseKey::shard("shardId-000000000001");
        assert_eq!(key.shard_id(), "shardId-000000000001");
        assert_eq!(key.stream(), None);
        assert_eq!(key, "shardId-000000000001");
    }

    #[test]
    fn a_java_multi_stream_key_reads_back_its_parts_and_round_trips() {
        let text = "123456789012:orders:1700000000:shardId-000000000007";
        let key = LeaseKey::from(text);
        let stream = StreamIdentifier { account: "123456789012".into(), name: "orders".into(), creation_epoch: 1_700_000_000 };
        assert_eq!(key.stream(), Some(stream.clone()));
        assert_eq!(key.shard_id(), "shardId-000000000007");
        assert_eq!(LeaseKey::multi_stream(&stream, "shardId-000000000007").as_str(), text);
        assert_eq!(key.stream_part(), Some("123456789012:orders:1700000000"));
    }

    #[test]
    fn a_sibling_is_a_shard_of_the_same_stream() {
        let multi = LeaseKey::from("123456789012:orders:1700000000:shardId-000000000007");
        assert_eq!(multi.sibling("shardId-000000000009"), "123456789012:orders:1700000000:shardId-000000000009");
        assert_eq!(multi.sibling("123456789012:orders:1700000000:shardId-000000000001"), "123456789012:orders:1700000000:shardId-000000000001");
        assert_eq!(LeaseKey::shard("shardId-000000000000").sibling("shardId-000000000001"), "shardId-000000000001");
    }
}
