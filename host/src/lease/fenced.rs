//! Writes fenced by a lease row, for what must land with a checkpoint or
//! not at all (the state room's commit scheme, `crate::state`): a
//! checkpoint written in one transaction with other items, a checkpoint
//! that marks the row, marks set and removed while the owner holds the
//! lease, and a condition item that holds a transaction to the row.
//!
//! The lease room carries these out without knowing what they hold: a
//! [`FencedCommit`] or [`FencedRecovery`] is handed to
//! [`super::LeaseStore::commit`] and [`super::LeaseStore::recover_state`]
//! and given the table to write through.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use futures_util::future::BoxFuture;

use super::dynamo::{checkpoint_update, fence, DynamoStore};
use super::{Checkpoint, Lease, LeaseError};

/// Writes committed with a checkpoint, atomically, fenced by the lease row
/// (owner and counter): what [`super::coordinator::HeldLease::commit`] writes.
pub trait FencedCommit: Send + Sync {
    /// Writes `checkpoint` (with `ShardEnd`, the shard's `children`) and
    /// these writes through `table` on `lease`'s row as last written: the
    /// row as written, or `None` if the lease was lost.
    fn commit<'a>(&'a self, table: &'a DynamoStore, lease: &'a Lease, checkpoint: &'a Checkpoint, children: &'a BTreeSet<String>) -> BoxFuture<'a, Result<Option<Lease>, LeaseError>>;
}

/// Finishes what an earlier owner's [`FencedCommit`] left half done, before
/// anything reads what it wrote.
pub trait FencedRecovery: Send + Sync {
    /// Finishes it on `lease` (held now by its owner); `false` if the lease
    /// was lost meanwhile.
    fn recover<'a>(&'a self, table: &'a DynamoStore, lease: &'a Lease) -> BoxFuture<'a, Result<bool, LeaseError>>;
}

/// Whether a canceled transaction failed on its first item: the lease
/// row's condition (the checkpoint's fence, or a [`DynamoStore::while_marked`]).
pub fn failed_on_lease_row<R>(error: &SdkError<TransactWriteItemsError, R>) -> bool {
    match error.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(canceled)) => {
            canceled.cancellation_reasons().first().and_then(|r| r.code()) == Some("ConditionalCheckFailed")
        }
        _ => false,
    }
}

impl DynamoStore {
    /// The DynamoDB client, for the other tables a fenced write touches.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Writes `checkpoint` and `items` in one transaction, the lease row's
    /// fenced update first, sent with `token` (the same commit sent again is
    /// applied once) and `client` settings (transactions are slow).
    pub async fn checkpoint_with_items(
        &self,
        lease: &Lease,
        (checkpoint, children): (&Checkpoint, &BTreeSet<String>),
        items: Vec<TransactWriteItem>,
        token: String,
        client: aws_sdk_dynamodb::config::Builder,
    ) -> Result<Option<Lease>, LeaseError> {
        let (expression, mut values) = checkpoint_update(checkpoint, children);
        let (condition, fence) = fence(lease, true);
        values.extend(fence);
        let update = Update::builder()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(lease.key.to_string()))
            .update_expression(expression)
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values.into_iter().map(|(name, value)| (name.to_owned(), value)).collect()))
            .build()
            .expect("table, key and expression are set");
        let items = std::iter::once(TransactWriteItem::builder().update(update).build()).chain(items).collect();
        let sent = self.client.transact_write_items().set_transact_items(Some(items)).client_request_token(token).customize().config_override(client).send().await;
        match sent {
            // A transaction returns no row; the row is the one it wrote.
            Ok(_) => Ok(Some(Lease {
                counter: lease.counter + 1,
                checkpoint: checkpoint.clone(),
                owner_switches_since_checkpoint: 0,
                children: if children.is_empty() { lease.children.clone() } else { children.clone() },
                ..lease.clone()
            })),
            Err(e) if failed_on_lease_row(&e) => {
                // Lost, unless a retry found our own write applied.
                let row = self.get(&lease.key).await?;
                Ok(row.filter(|row| row.counter == lease.counter + 1 && row.owner == lease.owner && row.checkpoint == *checkpoint))
            }
            Err(e) => Err(self.error("TransactWriteItems (checkpoint with state)", e)),
        }
    }

    /// Writes `checkpoint` and sets the row's `mark` to `value` in the same
    /// fenced update.
    pub async fn checkpoint_marking(&self, lease: &Lease, (checkpoint, children): (&Checkpoint, &BTreeSet<String>), mark: &str, value: &str) -> Result<Option<Lease>, LeaseError> {
        let (expression, values) = checkpoint_update(checkpoint, children);
        let update = self.conditional_update(lease, true).update_expression(format!("{expression}, {mark} = :mark"));
        let update = values.into_iter().fold(update, |update, (name, value)| update.expression_attribute_values(name, value));
        let update = update.expression_attribute_values(":mark", AttributeValue::S(value.to_owned()));
        let ours = |row: &Lease| row.owner == lease.owner && row.checkpoint == *checkpoint;
        self.send_update("UpdateItem (checkpoint marking the row)", lease, update, ours).await
    }

    /// Sets the row's `mark` to `value` (bumping the counter), fenced: the
    /// row as written, or `None` if the lease was lost.
    pub async fn mark(&self, lease: &Lease, mark: &str, value: &str) -> Result<Option<Lease>, LeaseError> {
        let update = self
            .conditional_update(lease, true)
            .update_expression(format!("SET leaseCounter = :next, {mark} = :mark"))
            .expression_attribute_values(":mark", AttributeValue::S(value.to_owned()));
        self.send_update("UpdateItem (marking the row)", lease, update, |row| row.owner == lease.owner).await
    }

    /// The string attributes `names` of `key`'s row, read consistently.
    pub async fn marks(&self, key: &str, names: &[&str]) -> Result<Vec<Option<String>>, LeaseError> {
        let row = self.row(key).await?;
        let text = |name: &&str| match row.as_ref().and_then(|item| item.get(*name)) {
            Some(AttributeValue::S(value)) => Some(value.clone()),
            _ => None,
        };
        Ok(names.iter().map(text).collect())
    }

    /// A transaction item that holds the transaction to `key`'s row still
    /// owned by `owner` with `mark` = `value`; put it first, so
    /// [`failed_on_lease_row`] tells when it failed.
    pub fn while_marked(&self, key: &str, owner: &str, mark: &str, value: &str) -> TransactWriteItem {
        let check = ConditionCheck::builder()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(key.to_owned()))
            .condition_expression(format!("leaseOwner = :owner AND {mark} = :mark"))
            .set_expression_attribute_values(Some(HashMap::from([
                (":owner".to_owned(), AttributeValue::S(owner.to_owned())),
                (":mark".to_owned(), AttributeValue::S(value.to_owned())),
            ])))
            .build()
            .expect("table, key and condition are set");
        TransactWriteItem::builder().condition_check(check).build()
    }

    /// Removes `key`'s row's `mark` if it is `value` (and, with `owner`, the
    /// row is still theirs); `false` when it was not.
    pub async fn unmark(&self, key: &str, owner: Option<&str>, mark: &str, value: &str) -> Result<bool, LeaseError> {
        let mut condition = format!("{mark} = :mark");
        let mut values = HashMap::from([(":mark".to_owned(), AttributeValue::S(value.to_owned()))]);
        if let Some(owner) = owner {
            condition.insert_str(0, "leaseOwner = :owner AND ");
            values.insert(":owner".to_owned(), AttributeValue::S(owner.to_owned()));
        }
        let removed = self
            .client
            .update_item()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(key.to_owned()))
            .update_expression(format!("REMOVE {mark}"))
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match removed {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(self.error("UpdateItem (unmarking the row)", e)),
        }
    }
}
