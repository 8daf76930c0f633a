//! The lease table in DynamoDB, in the Java KCL 2.x format so tables made by
//! Java KCL (and the tools around it) keep working:
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `leaseKey` | S (hash key) | shard id |
//! | `leaseOwner` | S | worker id; absent when unowned |
//! | `leaseCounter` | N | bumped by every write; the fencing token |
//! | `checkpoint` | S | sequence number, or `TRIM_HORIZON` / `LATEST` / `AT_TIMESTAMP` / `SHARD_END` |
//! | `checkpointSubSequenceNumber` | N | position inside a KPL record; 0 otherwise |
//! | `ownerSwitchesSinceCheckpoint` | N | |
//! | `parentShardId` | SS | parent and adjacent parent |
//! | `childShardIds` | SS | written with `SHARD_END` |
//! | `startingHashKey`, `endingHashKey` | S | the shard's hash range |
//! | `ownerHeartbeat` | N | kcl-host's: the owner's heartbeat counter at its last take or renewal (see [`Lease::owner_heartbeat`]) |
//!
//! Rows are only ever changed with `UpdateItem` on named attributes, so
//! attributes this code does not know survive every write.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use super::table::KeyedTable;
use super::{Checkpoint, Lease, LeaseError, LeaseScan, LeaseStore};
use crate::aws::AwsError;

type Item = HashMap<String, AttributeValue>;

/// A lease table in DynamoDB.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: KeyedTable,
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

    fn error<E, R>(&self, operation: &'static str, error: SdkError<E, R>) -> LeaseError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        self.table.error(operation, error)
    }

    /// An `UpdateItem` on `lease`'s row that bumps the counter, conditional on
    /// the counter as read (and the owner, when `owner_must_match`).
    fn conditional_update(&self, lease: &Lease, owner_must_match: bool) -> UpdateItemFluentBuilder {
        let mut condition = "leaseCounter = :counter".to_owned();
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(lease.key.clone()))
            .expression_attribute_values(":counter", number(lease.counter))
            .expression_attribute_values(":next", number(lease.counter + 1))
            .return_values(ReturnValue::AllNew);
        if owner_must_match {
            match &lease.owner {
                Some(owner) => {
                    condition.push_str(" AND leaseOwner = :owner");
                    update = update.expression_attribute_values(":owner", AttributeValue::S(owner.clone()));
                }
                None => condition.push_str(" AND attribute_not_exists(leaseOwner)"),
            }
        }
        update.condition_expression(condition)
    }

    /// Sends a conditional update: the new lease, or `None` if the condition
    /// failed. `is_ours` recognises the row our own write leaves: when the
    /// SDK retried a write whose first attempt was applied (its answer lost),
    /// the retry fails the condition, and the row shows it was us.
    async fn send_update(
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
                let timeouts = TimeoutConfig::builder().operation_attempt_timeout(timeout).operation_timeout(timeout).build();
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
    async fn get(&self, key: &str) -> Result<Option<Lease>, LeaseError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table.name)
            .key("leaseKey", AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.error("GetItem", e))?;
        Ok(output.item.as_ref().and_then(|item| parse(item).ok()))
    }
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// Reads one row; the error names what is wrong with it.
pub fn parse(item: &Item) -> Result<Lease, String> {
    let string = |name: &str| match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("`{name}` should be a string, found {other:?}")),
    };
    let number = |name: &str| match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(n)) => n.parse::<u64>().map(Some).map_err(|_| format!("`{name}` is not a whole number: {n}")),
        Some(other) => Err(format!("`{name}` should be a number, found {other:?}")),
    };
    let set = |name: &str| match item.get(name) {
        None => Ok(BTreeSet::new()),
        Some(AttributeValue::Ss(values)) => Ok(values.iter().cloned().collect()),
        Some(AttributeValue::S(value)) => Ok(BTreeSet::from([value.clone()])),
        Some(other) => Err(format!("`{name}` should be a string set, found {other:?}")),
    };
    let key = string("leaseKey")?.ok_or("no `leaseKey`")?;
    let checkpoint_text = string("checkpoint")?.ok_or("no `checkpoint`")?;
    let sub = number("checkpointSubSequenceNumber")?.unwrap_or(0);
    let checkpoint = Checkpoint::parse(&checkpoint_text, sub)
        .ok_or_else(|| format!("`checkpoint` is neither a sequence number nor a known position: {checkpoint_text}"))?;
    Ok(Lease {
        key,
        owner: string("leaseOwner")?,
        counter: number("leaseCounter")?.ok_or("no `leaseCounter`")?,
        checkpoint,
        owner_switches_since_checkpoint: number("ownerSwitchesSinceCheckpoint")?.unwrap_or(0),
        parents: set("parentShardId")?,
        children: set("childShardIds")?,
        owner_heartbeat: number("ownerHeartbeat")?,
        starting_hash_key: string("startingHashKey")?,
        ending_hash_key: string("endingHashKey")?,
    })
}

/// A Java KCL 3.x worker's metrics row (`entityType` `WORKER_METRIC_STATS`):
/// its worker id (`leaseKey`) and when it last reported (`lut`, epoch
/// seconds on that worker's clock).
fn kcl3_worker(item: &Item) -> Option<(String, u64)> {
    match (item.get("entityType")?, item.get("leaseKey")?, item.get("lut")?) {
        (AttributeValue::S(kind), AttributeValue::S(worker), AttributeValue::N(lut)) if kind == "WORKER_METRIC_STATS" => {
            Some((worker.clone(), lut.parse().ok()?))
        }
        _ => None,
    }
}

/// `set` (a `SET` clause) and `remove` (attributes to drop), recording the
/// writer's heartbeat counter too, or dropping a counter left by an earlier
/// owner when it keeps none.
fn with_heartbeat(update: UpdateItemFluentBuilder, set: &str, remove: &[&str], heartbeat: Option<u64>) -> (UpdateItemFluentBuilder, String) {
    let mut remove = remove.to_vec();
    let (update, set) = match heartbeat {
        Some(counter) => (update.expression_attribute_values(":heartbeat", number(counter)), format!("{set}, ownerHeartbeat = :heartbeat")),
        None => {
            remove.push("ownerHeartbeat");
            (update, set.to_owned())
        }
    };
    let expression = if remove.is_empty() { set } else { format!("{set} REMOVE {}", remove.join(", ")) };
    (update, expression)
}

/// The row for a new lease.
fn to_item(lease: &Lease) -> Item {
    let mut item = Item::from([
        ("leaseKey".into(), AttributeValue::S(lease.key.clone())),
        ("leaseCounter".into(), number(lease.counter)),
        ("checkpoint".into(), AttributeValue::S(lease.checkpoint.as_column().to_owned())),
        ("checkpointSubSequenceNumber".into(), number(lease.checkpoint.sub_sequence_column())),
        ("ownerSwitchesSinceCheckpoint".into(), number(lease.owner_switches_since_checkpoint)),
    ]);
    if let Some(owner) = &lease.owner {
        item.insert("leaseOwner".into(), AttributeValue::S(owner.clone()));
    }
    // DynamoDB refuses empty sets: an absent attribute means "none".
    if !lease.parents.is_empty() {
        item.insert("parentShardId".into(), AttributeValue::Ss(lease.parents.iter().cloned().collect()));
    }
    if !lease.children.is_empty() {
        item.insert("childShardIds".into(), AttributeValue::Ss(lease.children.iter().cloned().collect()));
    }
    if let Some(key) = &lease.starting_hash_key {
        item.insert("startingHashKey".into(), AttributeValue::S(key.clone()));
    }
    if let Some(key) = &lease.ending_hash_key {
        item.insert("endingHashKey".into(), AttributeValue::S(key.clone()));
    }
    item
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
        );
        let update = update
            .update_expression(expression)
            .expression_attribute_values(":me", AttributeValue::S(owner.to_owned()))
            .expression_attribute_values(":zero", number(0))
            .expression_attribute_values(":switches", number(switches));
        self.send_update("UpdateItem (take lease)", lease, update, |row| row.is_owned_by(owner)).await
    }

    async fn renew(&self, lease: &Lease, heartbeat: Option<u64>) -> Result<Option<Lease>, LeaseError> {
        let (update, expression) = with_heartbeat(self.conditional_update(lease, true), "SET leaseCounter = :next", &[], heartbeat);
        let update = update.update_expression(expression);
        self.send_update_within("UpdateItem (renew lease)", lease, update, |row| row.owner == lease.owner, self.renewal_timeout).await
    }

    async fn checkpoint(&self, lease: &Lease, checkpoint: &Checkpoint, children: &BTreeSet<String>) -> Result<Option<Lease>, LeaseError> {
        let mut expression = "SET leaseCounter = :next, checkpoint = :checkpoint, \
             checkpointSubSequenceNumber = :sub, ownerSwitchesSinceCheckpoint = :zero"
            .to_owned();
        let mut update = self
            .conditional_update(lease, true)
            .expression_attribute_values(":checkpoint", AttributeValue::S(checkpoint.as_column().to_owned()))
            .expression_attribute_values(":sub", number(checkpoint.sub_sequence_column()))
            .expression_attribute_values(":zero", number(0));
        if !children.is_empty() {
            expression.push_str(", childShardIds = :children");
            update = update.expression_attribute_values(":children", AttributeValue::Ss(children.iter().cloned().collect()));
        }
        let ours = |row: &Lease| row.owner == lease.owner && row.checkpoint == *checkpoint;
        self.send_update("UpdateItem (checkpoint)", lease, update.update_expression(expression), ours).await
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Position;

    #[test]
    fn a_java_kcl_row_round_trips() {
        let item = Item::from([
            ("leaseKey".into(), AttributeValue::S("shardId-000000000002".into())),
            ("leaseOwner".into(), AttributeValue::S("host-a:1234".into())),
            ("leaseCounter".into(), AttributeValue::N("41".into())),
            ("checkpoint".into(), AttributeValue::S("49590338271490256608559692538361571095921575989136588898".into())),
            ("checkpointSubSequenceNumber".into(), AttributeValue::N("0".into())),
            ("ownerSwitchesSinceCheckpoint".into(), AttributeValue::N("2".into())),
            ("parentShardId".into(), AttributeValue::Ss(vec!["shardId-000000000000".into()])),
            ("startingHashKey".into(), AttributeValue::S("0".into())),
            ("endingHashKey".into(), AttributeValue::S("170141183460469231731687303715884105727".into())),
        ]);
        let lease = parse(&item).unwrap();
        assert_eq!(lease.owner.as_deref(), Some("host-a:1234"));
        assert_eq!(lease.counter, 41);
        assert_eq!(
            lease.checkpoint,
            Checkpoint::At(Position::new("49590338271490256608559692538361571095921575989136588898", 0).unwrap())
        );
        assert_eq!(lease.parents, BTreeSet::from(["shardId-000000000000".to_owned()]));
        assert_eq!(to_item(&lease), item);
    }

    #[test]
    fn malformed_rows_say_what_is_wrong() {
        let base = || Item::from([
            ("leaseKey".into(), AttributeValue::S("s".into())),
            ("leaseCounter".into(), AttributeValue::N("1".into())),
            ("checkpoint".into(), AttributeValue::S("TRIM_HORIZON".into())),
        ]);
        assert!(parse(&base()).is_ok());
        let mut item = base();
        item.insert("leaseCounter".into(), AttributeValue::S("one".into()));
        assert!(parse(&item).unwrap_err().contains("`leaseCounter` should be a number"));
        let mut item = base();
        item.insert("checkpoint".into(), AttributeValue::S("SOMEWHERE".into()));
        assert!(parse(&item).unwrap_err().contains("`checkpoint` is neither"));
        let mut item = base();
        item.remove("leaseKey");
        assert_eq!(parse(&item).unwrap_err(), "no `leaseKey`");
    }
}
