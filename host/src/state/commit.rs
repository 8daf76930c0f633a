//! A checkpoint's state changes, committed with it ([`FencedCommit`]): as
//! the items of the transaction that writes the lease row, or, past one
//! transaction's size, through a redo log ([`super::log`]).

use std::collections::BTreeSet;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use futures_util::future::BoxFuture;
use md5::{Digest, Md5};

use super::log::{commit_by_log, fits_one_transaction};
use crate::aws::patient;
use crate::lease::dynamo::DynamoStore;
use crate::lease::fenced::FencedCommit;
use crate::lease::{Checkpoint, Lease, LeaseError};
use crate::runtime::StateChanges;

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

impl FencedCommit for StateCommit<'_> {
    fn commit<'a>(&'a self, table: &'a DynamoStore, lease: &'a Lease, checkpoint: &'a Checkpoint, children: &'a BTreeSet<String>) -> BoxFuture<'a, Result<Option<Lease>, LeaseError>> {
        Box::pin(async move {
            if !fits_one_transaction(self.changes) {
                return commit_by_log(table, lease, (checkpoint, children), self).await;
            }
            let writes = self.writes(checkpoint.as_column());
            let token = self.token(lease.key.as_str(), lease.counter, checkpoint.as_column());
            table.checkpoint_with_items(lease, (checkpoint, children), writes, token, patient()).await
        })
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
