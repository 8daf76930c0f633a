//! A lease row, in the Java KCL 2.x format so tables made by Java KCL (and
//! the tools around it) keep working:
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `leaseKey` | S (hash key) | shard id; `account:stream:creationEpoch:shardId` in a multi-stream table |
//! | `leaseOwner` | S | worker id; absent when unowned |
//! | `leaseCounter` | N | bumped by every write; the fencing token |
//! | `checkpoint` | S | sequence number, or `TRIM_HORIZON` / `LATEST` / `AT_TIMESTAMP` / `SHARD_END` |
//! | `checkpointSubSequenceNumber` | N | position inside a KPL record; 0 otherwise |
//! | `ownerSwitchesSinceCheckpoint` | N | |
//! | `parentShardId` | SS | parent and adjacent parent (shard ids) |
//! | `childShardIds` | SS | written with `SHARD_END` (shard ids) |
//! | `streamName`, `shardId` | S | a multi-stream row's parts: `account:stream:creationEpoch`, and the shard id |
//! | `startingHashKey`, `endingHashKey` | S | the shard's hash range |
//! | `ownerHeartbeat` | N | kcl-host's: the owner's heartbeat counter at its last take or renewal (see [`Lease::owner_heartbeat`]) |
//! | `ownerHeartbeatWorker` | S | kcl-host's: whose counter that is; while it names the owner, the owner is a kcl-host worker (see [`Lease::owner_heartbeat_worker`]) |

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;

pub(super) use super::table::Item;
use super::{Checkpoint, Lease, LeaseKey};

/// A number attribute.
pub(super) fn number(n: u64) -> AttributeValue {
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
    let key = LeaseKey::from(string("leaseKey")?.ok_or("no `leaseKey`")?);
    // Java KCL names parents and children by shard id in a multi-stream
    // row too; in memory they are lease keys, as the rules look them up.
    let keys = |name: &str| set(name).map(|ids| ids.iter().map(|id| key.sibling(id).into()).collect());
    let checkpoint_text = string("checkpoint")?.ok_or("no `checkpoint`")?;
    let sub = number("checkpointSubSequenceNumber")?.unwrap_or(0);
    let checkpoint = Checkpoint::parse(&checkpoint_text, sub)
        .ok_or_else(|| format!("`checkpoint` is neither a sequence number nor a known position: {checkpoint_text}"))?;
    Ok(Lease {
        key: key.clone(),
        owner: string("leaseOwner")?,
        counter: number("leaseCounter")?.ok_or("no `leaseCounter`")?,
        checkpoint,
        owner_switches_since_checkpoint: number("ownerSwitchesSinceCheckpoint")?.unwrap_or(0),
        parents: keys("parentShardId")?,
        children: keys("childShardIds")?,
        owner_heartbeat: number("ownerHeartbeat")?,
        owner_heartbeat_worker: string("ownerHeartbeatWorker")?,
        starting_hash_key: string("startingHashKey")?,
        ending_hash_key: string("endingHashKey")?,
    })
}

/// The key of Java KCL 3.x's leader row (`entityType` `LEADER`), which its
/// workers write to the lease table as they start.
pub(super) const KCL3_LEADER_KEY: &str = "Leader";

/// A Java KCL 3.x worker's metrics row (`entityType` `WORKER_METRIC_STATS`):
/// its worker id (`leaseKey`) and when it last reported (`lut`, epoch
/// seconds on that worker's clock).
pub(super) fn kcl3_worker(item: &Item) -> Option<(String, u64)> {
    match (item.get("entityType")?, item.get("leaseKey")?, item.get("lut")?) {
        (AttributeValue::S(kind), AttributeValue::S(worker), AttributeValue::N(lut)) if kind == "WORKER_METRIC_STATS" => {
            Some((worker.clone(), lut.parse().ok()?))
        }
        _ => None,
    }
}

/// `keys` (lease keys of shards) as a row holds them: shard ids.
pub(super) fn shard_ids(keys: &BTreeSet<String>) -> AttributeValue {
    AttributeValue::Ss(keys.iter().map(|key| LeaseKey::from(key).shard_id().to_owned()).collect())
}

/// The row for a new lease.
pub(super) fn to_item(lease: &Lease) -> Item {
    let mut item = Item::from([
        ("leaseKey".into(), AttributeValue::S(lease.key.to_string())),
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
        item.insert("parentShardId".into(), shard_ids(&lease.parents));
    }
    if !lease.children.is_empty() {
        item.insert("childShardIds".into(), shard_ids(&lease.children));
    }
    // Java KCL reads a multi-stream row's parts from these two.
    if let Some(stream) = lease.key.stream_part() {
        item.insert("streamName".into(), AttributeValue::S(stream.to_owned()));
        item.insert("shardId".into(), AttributeValue::S(lease.key.shard_id().to_owned()));
    }
    if let Some(key) = &lease.starting_hash_key {
        item.insert("startingHashKey".into(), AttributeValue::S(key.clone()));
    }
    if let Some(key) = &lease.ending_hash_key {
        item.insert("endingHashKey".into(), AttributeValue::S(key.clone()));
    }
    item
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
    fn a_java_multi_stream_row_names_its_parents_by_shard_id_and_round_trips() {
        let stream = "123456789012:orders:1700000000";
        let item = Item::from([
            ("leaseKey".into(), AttributeValue::S(format!("{stream}:shardId-000000000002"))),
            ("leaseCounter".into(), AttributeValue::N("3".into())),
            ("checkpoint".into(), AttributeValue::S("TRIM_HORIZON".into())),
            ("checkpointSubSequenceNumber".into(), AttributeValue::N("0".into())),
            ("ownerSwitchesSinceCheckpoint".into(), AttributeValue::N("0".into())),
            ("parentShardId".into(), AttributeValue::Ss(vec!["shardId-000000000000".into()])),
            ("childShardIds".into(), AttributeValue::Ss(vec!["shardId-000000000005".into()])),
            ("streamName".into(), AttributeValue::S(stream.into())),
            ("shardId".into(), AttributeValue::S("shardId-000000000002".into())),
        ]);
        let lease = parse(&item).unwrap();
        assert_eq!(lease.parents, BTreeSet::from([format!("{stream}:shardId-000000000000")]));
        assert_eq!(lease.children, BTreeSet::from([format!("{stream}:shardId-000000000005")]));
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
