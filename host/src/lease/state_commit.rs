//! A checkpoint's state changes as the items of the transaction that
//! writes them with the checkpoint (`DynamoStore::commit`); the state table
//! itself is the `state` room's.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use md5::{Digest, Md5};

use crate::runtime::StateChanges;

/// Time-outs for state reads and commits: a transaction of 100 items or a
/// read of 100 keys takes longer than the DynamoDB client's 1 s to its
/// first byte (kept short for renewals), and nothing about them is urgent.
pub fn patient() -> aws_sdk_dynamodb::config::Builder {
    use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
    let timeouts = TimeoutConfig::builder().read_timeout(std::time::Duration::from_secs(10)).operation_attempt_timeout(std::time::Duration::from_secs(15)).build();
    aws_sdk_dynamodb::config::Builder::default().timeout_config(timeouts)
}

/// A string attribute of a state item, or "" when it has none.
pub fn text(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => String::new(),
    }
}

/// A state item's hash key: the stream and the processor's key.
pub fn item_key(stream: &str, key: &str) -> AttributeValue {
    AttributeValue::S(format!("{stream}/{key}"))
}

/// The state changes a checkpoint commits, and where they go.
pub struct StateCommit<'a> {
    /// The state table's name.
    pub table: &'a str,
    /// The shard's stream.
    pub stream: &'a str,
    /// The shard whose checkpoint this is.
    pub shard: &'a str,
    /// key → new value (`None`: deleted).
    pub changes: &'a StateChanges,
}

impl StateCommit<'_> {
    /// One `Put` or `Delete` per changed key, each item recording the shard
    /// and the checkpoint (`checkpoint`) that wrote it.
    pub fn writes(&self, checkpoint: &str) -> Vec<TransactWriteItem> {
        self.changes
            .iter()
            .map(|(key, value)| match value {
                Some(value) => {
                    let put = Put::builder()
                        .table_name(self.table)
                        .item("stateKey", item_key(self.stream, key))
                        .item("stream", AttributeValue::S(self.stream.to_owned()))
                        .item("key", AttributeValue::S(key.clone()))
                        .item("value", AttributeValue::B(Blob::new(value.clone())))
                        .item("shard", AttributeValue::S(self.shard.to_owned()))
                        .item("checkpoint", AttributeValue::S(checkpoint.to_owned()))
                        .build()
                        .expect("table and item are set");
                    TransactWriteItem::builder().put(put).build()
                }
                None => {
                    let delete = Delete::builder().table_name(self.table).key("stateKey", item_key(self.stream, key)).build().expect("table and key are set");
                    TransactWriteItem::builder().delete(delete).build()
                }
            })
            .collect()
    }

    /// A client request token for the transaction that commits these
    /// changes with `checkpoint` on the lease row at `counter`: the same
    /// commit sent again (the SDK's retry of an answer that was lost) is
    /// applied once, and a different one is never mistaken for it.
    pub fn token(&self, lease_key: &str, counter: u64, checkpoint: &str) -> String {
        let mut hash = Md5::new();
        for part in [lease_key, &counter.to_string(), checkpoint] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        for (key, value) in self.changes {
            hash.update(key.as_bytes());
            hash.update(value.as_deref().map_or(&[1][..], |v| v));
            hash.update([0]);
        }
        hash.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_one_put_or_delete_naming_the_shard_and_checkpoint() {
        let changes = StateChanges::from([("alice".to_owned(), Some(b"12".to_vec())), ("bob".to_owned(), None)]);
        let commit = StateCommit { table: "app-KclHostState", stream: "orders", shard: "shardId-000000000001", changes: &changes };
        let writes = commit.writes("4955");
        let put = writes[0].put().expect("alice is set");
        assert_eq!(put.item()["stateKey"], AttributeValue::S("orders/alice".into()));
        assert_eq!(put.item()["value"], AttributeValue::B(Blob::new(b"12".to_vec())));
        assert_eq!(put.item()["shard"], AttributeValue::S("shardId-000000000001".into()));
        assert_eq!(put.item()["checkpoint"], AttributeValue::S("4955".into()));
        assert_eq!(writes[1].delete().expect("bob is deleted").key()["stateKey"], AttributeValue::S("orders/bob".into()));
    }

    #[test]
    fn the_token_changes_with_the_counter_and_with_the_changes() {
        let a = StateChanges::from([("k".to_owned(), Some(b"1".to_vec()))]);
        let b = StateChanges::from([("k".to_owned(), Some(b"2".to_vec()))]);
        let commit = |changes| StateCommit { table: "t", stream: "s", shard: "x", changes };
        let token = commit(&a).token("lease", 7, "100");
        assert_eq!(token, commit(&a).token("lease", 7, "100"));
        assert_eq!(token.len(), 32, "DynamoDB takes 1 to 36 characters");
        assert_ne!(token, commit(&a).token("lease", 8, "100"));
        assert_ne!(token, commit(&b).token("lease", 7, "100"));
    }
}
