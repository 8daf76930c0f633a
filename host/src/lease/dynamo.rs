//! The lease table in DynamoDB, in the Java KCL 2.x format (see
//! `lease/row.rs`) so tables made by Java KCL (and the tools around it)
//! keep working. Rows are only ever changed with `UpdateItem` on named
//! attributes, so attributes this code does not know survive every write.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use super::row::{self, kcl3_worker, number, parse, to_item};
use super::table::KeyedTable;
use super::{Checkpoint, Lease, LeaseError, LeaseScan, LeaseStore};
use crate::aws::AwsError;
use super::fenced::{FencedCommit, FencedRecovery};

/// A lease table in DynamoDB.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    pub(super) client: Client,
    pub(super) table: KeyedTable,
    /// How long one renewal may take, in place of the client's per-attempt
    /// time-out (see [`Self::with_renewal_timeout`]).
    renewal_timeout: Option<Duration>,
}

impl DynamoStore {
    /// The lease table `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let table = KeyedTable { client: client.clone(), name: table.into(), key: "leaseKey", what: "lease table" };
        Self { client, table, renewal_timeout: None }
    }

    /// Refuses a table that is missing or is not a lease table, creating nothing.
    pub async fn check_table(&self) -> Result<(), LeaseError> {
        self.table.check().await
    }

    /// Lets a renewal take up to `timeout` (the failover time: a renewal
    /// answered late but within the lease's validity still keeps it)
    /// rather than the client's per-attempt time-out, whose retries of a
    /// slow row would all time out alike.
    pub fn with_renewal_timeout(self, timeout: Duration) -> Self {
        Self { renewal_timeout: Some(timeout), ..self }
    }

    /// Whether Java KCL 3.x's leader row (`leaseKey` `Leader`) is in the
    /// table. A 3.x worker writes it within a second of starting, seconds
    /// before its metrics row, so one small read tells a fleet whose table
    /// has no 3.x rows that one joined; a scan would read every lease.
    pub async fn has_kcl3_leader(&self) -> Result<bool, LeaseError> {
        let read = self
            .client
            .get_item()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(row::KCL3_LEADER_KEY.to_owned()))
            .projection_expression("leaseKey")
            .send()
            .await
            .map_err(|e| self.error("GetItem", e))?;
        Ok(read.item().is_some())
    }

    /// `error` from `operation` on this table (or one written beside it), said plainly.
    pub fn error<E, R>(&self, operation: &'static str, error: SdkError<E, R>) -> LeaseError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        self.table.error(operation, error)
    }

    /// An `UpdateItem` on `lease`'s row that bumps the counter, conditional on
    /// the counter as read (and the owner, when `owner_must_match`).
    pub(super) fn conditional_update(&self, lease: &Lease, owner_must_match: bool) -> UpdateItemFluentBuilder {
        let (condition, values) = fence(lease, owner_must_match);
        let update = self
            .client
            .update_item()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(lease.key.to_string()))
            .return_values(ReturnValue::AllNew);
        values.into_iter().fold(update, |update, (name, value)| update.expression_attribute_values(name, value)).condition_expression(condition)
    }

    /// Sends a conditional update: the new lease, or `None` if the condition
    /// failed. `is_ours` recognises the row our own write leaves: when the
    /// SDK retried a write whose first attempt was applied (its answer lost),
    /// the retry fails the condition, and the row shows it was us.
    pub(super) async fn send_update(
        &self,
        operation: &'static str,
        lease: &Lease,
        update: UpdateItemFluentBuilder,
        is_ours: impl Fn(&Lease) -> bool,
    ) -> Result<Option<Lease>, LeaseError> {
        self.send_update_within(operation, lease, update, is_ours, None).await
    }

    /// [`Self::send_update`], all attempts within `timeout` when given.
    async fn send_update_within(
        &self,
        operation: &'static str,
        lease: &Lease,
        update: UpdateItemFluentBuilder,
        is_ours: impl Fn(&Lease) -> bool,
        timeout: Option<Duration>,
    ) -> Result<Option<Lease>, LeaseError> {
        let malformed = |reason: String| LeaseError::from(AwsError::Service { operation, code: "MalformedLease".into(), message: reason });
        let update = update.return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let sent = match timeout {
            Some(timeout) => {
                // The whole time, first byte included: a slow answer that
                // comes within it keeps the lease.
                let timeouts = TimeoutConfig::builder().operation_attempt_timeout(timeout).operation_timeout(timeout).disable_read_timeout().build();
                update.customize().config_override(aws_sdk_dynamodb::config::Builder::default().timeout_config(timeouts)).send().await
            }
            None => update.send().await,
        };
        match sent {
            Ok(output) => parse(&output.attributes.unwrap_or_default()).map(Some).map_err(malformed),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    // DynamoDB returns the row as it is; a server that does
                    // not (dynalite) gets a consistent read instead.
                    let current = match &failed.item {
                        Some(item) => Some(parse(item).map_err(malformed)?),
                        None => self.get(&lease.key).await?,
                    };
                    Ok(current.filter(|row| row.counter == lease.counter + 1 && is_ours(row)))
                }
                _ => Err(self.error(operation, e)),
            },
        }
    }

    /// One row, read consistently; `None` if it is missing or unreadable.
    pub(super) async fn get(&self, key: &str) -> Result<Option<Lease>, LeaseError> {
        Ok(self.row(key).await?.as_ref().and_then(|item| parse(item).ok()))
    }

    /// One row as it is stored, read consistently.
    pub(super) async fn row(&self, key: &str) -> Result<Option<row::Item>, LeaseError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error("GetItem", e))?;
        Ok(output.item)
    }
}

/// The condition that fences a write on `lease`'s row — the counter as
/// read, and the owner when `owner_must_match` — with its values, and
/// `:next` for the bumped counter.
pub(super) fn fence(lease: &Lease, owner_must_match: bool) -> (String, Vec<(&'static str, AttributeValue)>) {
    let mut condition = "leaseCounter = :counter".to_owned();
    let mut values = vec![(":counter", number(lease.counter)), (":next", number(lease.counter + 1))];
    if owner_must_match {
        match &lease.owner {
            Some(owner) => {
                condition.push_str(" AND leaseOwner = :owner");
                values.push((":owner", AttributeValue::S(owner.clone())));
            }
            None => condition.push_str(" AND attribute_not_exists(leaseOwner)"),
        }
    }
    (condition, values)
}

/// A checkpoint's `SET` clause (bumping the counter to `:next`) and its
/// values; with `children`, the shard's children too.
pub(super) fn checkpoint_update(checkpoint: &Checkpoint, children: &BTreeSet<String>) -> (String, Vec<(&'static str, AttributeValue)>) {
    let mut expression = "SET leaseCounter = :next, checkpoint = :checkpoint, \
         checkpointSubSequenceNumber = :sub, ownerSwitchesSinceCheckpoint = :zero"
        .to_owned();
    let mut values = vec![
        (":checkpoint", AttributeValue::S(checkpoint.as_column().to_owned())),
        (":sub", number(checkpoint.sub_sequence_column())),
        (":zero", number(0)),
    ];
    if !children.is_empty() {
        expression.push_str(", childShardIds = :children");
        values.push((":children", row::shard_ids(children)));
    }
    (expression, values)
}

/// `set` (a `SET` clause) and `remove` (attributes to drop), recording the
/// heartbeat counter of `writer` (the owner) too, with its worker id, or
/// dropping a counter left by an earlier owner when it keeps none.
fn with_heartbeat(update: UpdateItemFluentBuilder, set: &str, remove: &[&str], heartbeat: Option<u64>, writer: &str) -> (UpdateItemFluentBuilder, String) {
    let mut remove = remove.to_vec();
    let (update, set) = match heartbeat {
        Some(counter) => (
            update.expression_attribute_values(":heartbeat", number(counter)).expression_attribute_values(":writer", AttributeValue::S(writer.to_owned())),
            format!("{set}, ownerHeartbeat = :heartbeat, ownerHeartbeatWorker = :writer"),
        ),
        None => {
            remove.extend(["ownerHeartbeat", "ownerHeartbeatWorker"]);
            (update, set.to_owned())
        }
    };
    let expression = if remove.is_empty() { set } else { format!("{set} REMOVE {}", remove.join(", ")) };
    (update, expression)
}

impl LeaseStore for DynamoStore {
    async fn ensure_table(&self) -> Result<(), LeaseError> {
        self.table.ensure().await
    }

    async fn scan(&self) -> Result<LeaseScan, LeaseError> {
        let mut scan = LeaseScan::default();
        // Eventually consistent, at half the cost: a stale row only makes a
        // lease look expired later (never sooner), and every take is
        // conditional on the counter as read, so a stale read cannot win.
        let mut pages = self.client.scan().table_name(&self.table.name).consistent_read(false).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.error("Scan", e))?;
            for item in page.items() {
                // Java KCL 3.x marks every row it writes; its leases read as any other.
                match item.get("entityType") {
                    None => {}
                    Some(AttributeValue::S(kind)) if kind == "LEASE" => {}
                    Some(_) => {
                        scan.kcl3_rows += 1;
                        if let Some((worker, last_update)) = kcl3_worker(item) {
                            scan.kcl3_workers.insert(worker, last_update);
                        }
                        continue;
                    }
                }
                match parse(item) {
                    Ok(lease) => scan.leases.push(lease),
                    Err(reason) => {
                        let key = match item.get("leaseKey") {
                            Some(AttributeValue::S(key)) => {
                                scan.unreadable.insert(key.clone());
                                key.clone()
                            }
                            Some(other) => format!("{other:?}"),
                            None => "(no leaseKey)".to_owned(),
                        };
                        tracing::warn!(table = %self.table.name, key, "skipping a lease row that cannot be read (left as it is): {reason}");
                    }
                }
            }
        }
        Ok(scan)
    }

    async fn create(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table.name)
            .set_item(Some(to_item(lease)))
            .condition_expression("attribute_not_exists(leaseKey)")
            .send()
            .await;
        match put {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(self.error("PutItem", e)),
        }
    }

    async fn take(&self, lease: &Lease, owner: &str, heartbeat: Option<u64>) -> Result<Option<Lease>, LeaseError> {
        let switches = if lease.is_owned_by(owner) { 0 } else { 1 };
        let (update, expression) = with_heartbeat(
            self.conditional_update(lease, false),
            "SET leaseOwner = :me, leaseCounter = :next, \
             ownerSwitchesSinceCheckpoint = if_not_exists(ownerSwitchesSinceCheckpoint, :zero) + :switches",
            // A Java KCL 3.x handoff in flight names its old owner there;
            // 3.x clears it on every take too.
            &["checkpointOwner"],
            heartbeat,
            owner,
        );
        let update = update
            .update_expression(expression)
            .expression_attribute_values(":me", AttributeValue::S(owner.to_owned()))
            .expression_attribute_values(":zero", number(0))
            .expression_attribute_values(":switches", number(switches));
        self.send_update("UpdateItem (take lease)", lease, update, |row| row.is_owned_by(owner)).await
    }

    async fn renew(&self, lease: &Lease, heartbeat: Option<u64>) -> Result<Option<Lease>, LeaseError> {
        let owner = lease.owner.as_deref().unwrap_or_default();
        let (update, expression) = with_heartbeat(self.conditional_update(lease, true), "SET leaseCounter = :next", &[], heartbeat, owner);
        let update = update.update_expression(expression);
        self.send_update_within("UpdateItem (renew lease)", lease, update, |row| row.owner == lease.owner, self.renewal_timeout).await
    }

    async fn checkpoint(&self, lease: &Lease, checkpoint: &Checkpoint, children: &BTreeSet<String>) -> Result<Option<Lease>, LeaseError> {
        let (expression, values) = checkpoint_update(checkpoint, children);
        let update = self.conditional_update(lease, true).update_expression(expression);
        let update = values.into_iter().fold(update, |update, (name, value)| update.expression_attribute_values(name, value));
        let ours = |row: &Lease| row.owner == lease.owner && row.checkpoint == *checkpoint;
        self.send_update("UpdateItem (checkpoint)", lease, update, ours).await
    }

    async fn commit(&self, lease: &Lease, checkpoint: &Checkpoint, children: &BTreeSet<String>, writes: &dyn FencedCommit) -> Result<Option<Lease>, LeaseError> {
        writes.commit(self, lease, checkpoint, children).await
    }

    async fn recover_state(&self, lease: &Lease, recovery: &dyn FencedRecovery) -> Result<bool, LeaseError> {
        recovery.recover(self, lease).await
    }

    async fn evict(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let update = self.conditional_update(lease, true).update_expression("SET leaseCounter = :next REMOVE leaseOwner");
        Ok(self.send_update("UpdateItem (evict lease)", lease, update, |row| row.owner.is_none()).await?.is_some())
    }

    async fn delete_finished(&self, key: &str) -> Result<bool, LeaseError> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(key.to_owned()))
            .condition_expression("checkpoint = :end")
            .expression_attribute_values(":end", AttributeValue::S(Checkpoint::SHARD_END.into()))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(self.error("DeleteItem", e)),
        }
    }
}
