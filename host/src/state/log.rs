//! Committing more state changes than one transaction holds (100 items,
//! 4 MB) still atomically with the checkpoint: a redo log.
//!
//! 1. The changes are written to the state table as log items
//!    (`~log/<lease key>/<token>/<n>`, about 350 KB each), which nothing reads.
//! 2. The checkpoint's update of the lease row — conditional on owner and
//!    counter, as every checkpoint — also sets `statePending` to
//!    `<state table>/<token>/<parts>`. This is the commit: before it the log
//!    is garbage, after it the changes are the shard's state.
//! 3. The changes are applied in transactions of up to 99 items, each with a
//!    condition check that the lease row still names this owner and this log
//!    (a worker that lost the lease stops; the next owner applies the log).
//! 4. `statePending` is removed (conditional on the same), the log items
//!    deleted, and then `stateLog`.
//!
//! Before step 1 the lease row names the log in `stateLog` (a fenced
//! write), so a log written and never committed (a kill between 1 and 2)
//! is found and deleted by the next owner, as is one whose deletes failed.
//! A worker applies a log it finds on a lease it holds (3, 4) before its
//! processor reads any state ([`StateRecovery`]). Applying
//! writes absolute values, so applying a log twice changes nothing. Cost
//! against one transaction: a `PutItem` per log item, a transaction per 99
//! changes (the same item writes), an `UpdateItem`, a `GetItem`, and the
//! log items' deletes.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, TransactWriteItem, WriteRequest};
use futures_util::future::BoxFuture;

use super::commit::{text, StateCommit};
use crate::aws::{patient, AwsError};
use crate::lease::dynamo::DynamoStore;
use crate::lease::fenced::{failed_on_lease_row, FencedRecovery};
use crate::lease::{Checkpoint, Lease, LeaseError};
use crate::runtime::StateChanges;

/// The lease row's attribute naming a committed log not yet applied.
const PENDING: &str = "statePending";
/// The lease row's attribute naming a log from before its first item is
/// written until its items are deleted.
const LOG: &str = "stateLog";
/// Most changes one apply transaction holds (one more item is its condition check).
const APPLY_ITEMS: usize = 99;
/// Most bytes of keys and values in one transaction (it carries 4 MB).
const APPLY_BYTES: usize = 3_500_000;
/// Most bytes of encoded changes in one log item (an item holds 400 KB).
const LOG_ITEM_BYTES: usize = 350_000;

/// Whether `changes` fit one transaction beside the checkpoint (more are
/// committed through a log).
pub fn fits_one_transaction(changes: &StateChanges) -> bool {
    changes.len() <= APPLY_ITEMS && size(changes.iter()) <= APPLY_BYTES
}

fn size<'a>(changes: impl Iterator<Item = (&'a String, &'a Option<Vec<u8>>)>) -> usize {
    changes.map(|(key, value)| key.len() + value.as_ref().map_or(0, Vec::len)).sum()
}

/// `changes` in groups that each fit one transaction, in key order.
fn groups(changes: &StateChanges) -> Vec<StateChanges> {
    let mut groups = vec![StateChanges::new()];
    for (key, value) in changes {
        let last = groups.last_mut().expect("one group at least");
        if last.len() == APPLY_ITEMS || size(last.iter()) + key.len() + value.as_ref().map_or(0, Vec::len) > APPLY_BYTES {
            groups.push(StateChanges::new());
        }
        groups.last_mut().expect("just pushed").insert(key.clone(), value.clone());
    }
    groups
}

/// The changes as log items' payloads: per change, the key's length (u32,
/// big-endian) and bytes, then 0 for a delete or 1, the value's length and
/// bytes. A change is never split between items.
fn encode(changes: &StateChanges) -> Vec<Vec<u8>> {
    let mut items = vec![Vec::new()];
    for (key, value) in changes {
        let mut entry = Vec::with_capacity(9 + key.len() + value.as_ref().map_or(0, Vec::len));
        entry.extend((key.len() as u32).to_be_bytes());
        entry.extend(key.as_bytes());
        match value {
            None => entry.push(0),
            Some(value) => {
                entry.push(1);
                entry.extend((value.len() as u32).to_be_bytes());
                entry.extend(value);
            }
        }
        let last = items.last_mut().expect("one item at least");
        if !last.is_empty() && last.len() + entry.len() > LOG_ITEM_BYTES {
            items.push(entry);
        } else {
            last.extend(entry);
        }
    }
    items
}

/// [`encode`]'s payloads back into changes.
fn decode(payloads: &[Vec<u8>]) -> Result<StateChanges, String> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if bytes.len() < n {
            return Err("a state log item ends inside a change".into());
        }
        let (taken, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(taken)
    }
    let length = |bytes: &mut &[u8]| -> Result<usize, String> { Ok(u32::from_be_bytes(take(bytes, 4)?.try_into().expect("4 bytes")) as usize) };
    let mut changes = StateChanges::new();
    for payload in payloads {
        let mut bytes = payload.as_slice();
        while !bytes.is_empty() {
            let n = length(&mut bytes)?;
            let key = String::from_utf8(take(&mut bytes, n)?.to_vec()).map_err(|_| "a state log key is not UTF-8".to_owned())?;
            let value = match take(&mut bytes, 1)?[0] {
                0 => None,
                _ => {
                    let n = length(&mut bytes)?;
                    Some(take(&mut bytes, n)?.to_vec())
                }
            };
            changes.insert(key, value);
        }
    }
    Ok(changes)
}

/// What `statePending` names: where the log is and how many items it has.
struct Pending {
    table: String,
    token: String,
    parts: usize,
}

impl Pending {
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.rsplitn(3, '/');
        let (count, token, table) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Pending { table: table.to_owned(), token: token.to_owned(), parts: count.parse().ok()? })
    }

    fn marker(&self) -> String {
        format!("{}/{}/{}", self.table, self.token, self.parts)
    }

    /// The `n`th log item's hash key.
    fn item_key(&self, lease_key: &str, n: usize) -> AttributeValue {
        AttributeValue::S(format!("~log/{lease_key}/{}/{n}", self.token))
    }
}

/// Commits `state` with `checkpoint` through a log (see the module).
pub(super) async fn commit_by_log(
    store: &DynamoStore,
    lease: &Lease,
    (checkpoint, children): (&Checkpoint, &BTreeSet<String>),
    state: &StateCommit<'_>,
) -> Result<Option<Lease>, LeaseError> {
    let payloads = encode(state.changes);
    let token = state.token(lease.key.as_str(), lease.counter, checkpoint.as_column());
    let pending = Pending { table: state.table.to_owned(), token, parts: payloads.len() };
    // One an earlier try wrote and did not commit goes first.
    if let (None, written) = named_logs(store, lease.key.as_str()).await? {
        discard_uncommitted(store, lease.key.as_str(), written).await;
    }
    // The intent: from now on the row names the log, committed or not.
    let Some(lease) = &store.mark(lease, LOG, &pending.marker()).await? else {
        return Ok(None);
    };
    for (n, payload) in payloads.into_iter().enumerate() {
        store
            .client()
            .put_item()
            .table_name(state.table)
            .item("stateKey", pending.item_key(lease.key.as_str(), n))
            .item("log", AttributeValue::B(Blob::new(payload)))
            .item("stream", AttributeValue::S(state.stream.to_owned()))
            .item("shard", AttributeValue::S(state.shard.to_owned()))
            .item("checkpoint", AttributeValue::S(checkpoint.as_column().to_owned()))
            .customize()
            .config_override(patient())
            .send()
            .await
            .map_err(|e| store.error("PutItem (state log)", e))?;
    }
    // The commit.
    let Some(updated) = store.checkpoint_marking(lease, (checkpoint, children), PENDING, &pending.marker()).await? else {
        return Ok(None);
    };
    // Committed: applied now, or by the next owner if this one loses the lease meanwhile.
    let owner = lease.owner.as_deref().unwrap_or_default();
    apply(store, lease.key.as_str(), owner, &pending, state, checkpoint.as_column()).await?;
    Ok(Some(updated))
}

/// The logs `lease_key`'s row names: committed (`statePending`), and
/// written (`stateLog`), read consistently.
async fn named_logs(store: &DynamoStore, lease_key: &str) -> Result<(Option<Pending>, Option<Pending>), LeaseError> {
    let marks = store.marks(lease_key, &[PENDING, LOG]).await?;
    let named = |n: usize| marks[n].as_deref().and_then(Pending::parse);
    Ok((named(0), named(1)))
}

/// Deletes a log the row names in `stateLog` only: written, never committed.
async fn discard_uncommitted(store: &DynamoStore, lease_key: &str, written: Option<Pending>) {
    if let Some(stale) = written {
        tracing::info!(shard = lease_key, "deleting the state log {} written and never committed", stale.token);
        discard_log(store, lease_key, &stale).await;
    }
}

/// Applies the log a lease's row names, if any (a commit whose worker
/// stopped before applying it), before its processor reads any state; a log
/// written and never committed is deleted.
pub struct StateRecovery;

impl FencedRecovery for StateRecovery {
    fn recover<'a>(&'a self, table: &'a DynamoStore, lease: &'a Lease) -> BoxFuture<'a, Result<bool, LeaseError>> {
        Box::pin(apply_pending_log(table, lease))
    }
}

/// [`StateRecovery`]: `false` if the lease was lost meanwhile.
async fn apply_pending_log(store: &DynamoStore, lease: &Lease) -> Result<bool, LeaseError> {
    let (pending, written) = named_logs(store, lease.key.as_str()).await?;
    let Some(pending) = pending else {
        discard_uncommitted(store, lease.key.as_str(), written).await;
        return Ok(true);
    };
    let mut payloads = Vec::with_capacity(pending.parts);
    let (mut stream, mut shard, mut checkpoint) = Default::default();
    for n in 0..pending.parts {
        let item = store
            .client()
            .get_item()
            .table_name(&pending.table)
            .key("stateKey", pending.item_key(lease.key.as_str(), n))
            .consistent_read(true)
            .customize()
            .config_override(patient())
            .send()
            .await
            .map_err(|e| store.error("GetItem (state log)", e))?
            .item
            .ok_or_else(|| malformed(format!("the state log of {} misses its item {n}", lease.key)))?;
        let Some(AttributeValue::B(payload)) = item.get("log") else { return Err(malformed(format!("the state log item {n} of {} has no `log`", lease.key))) };
        payloads.push(payload.clone().into_inner());
        (stream, shard, checkpoint) = (text(&item, "stream"), text(&item, "shard"), text(&item, "checkpoint"));
    }
    let changes = decode(&payloads).map_err(malformed)?;
    tracing::info!(shard = %lease.key, changes = changes.len(), "applying the state its last owner committed and did not apply");
    let state = StateCommit { table: &pending.table, stream: &stream, shard: &shard, changes: &changes };
    apply(store, lease.key.as_str(), lease.owner.as_deref().unwrap_or_default(), &pending, &state, &checkpoint).await
}

/// Steps 3 and 4: the changes in transactions fenced by the lease row,
/// retried until applied; `false` once the row no longer names `owner`
/// and `pending` (another worker applies it).
async fn apply(store: &DynamoStore, lease_key: &str, owner: &str, pending: &Pending, state: &StateCommit<'_>, checkpoint: &str) -> Result<bool, LeaseError> {
    let marker = pending.marker();
    for group in groups(state.changes) {
        let part = StateCommit { changes: &group, ..*state };
        let items: Vec<TransactWriteItem> = std::iter::once(store.while_marked(lease_key, owner, PENDING, &marker)).chain(part.writes(checkpoint)).collect();
        let mut wait = Duration::from_millis(100);
        loop {
            let sent = store.client().transact_write_items().set_transact_items(Some(items.clone())).customize().config_override(patient()).send().await;
            match sent {
                Ok(_) => break,
                Err(e) if failed_on_lease_row(&e) => return Ok(false),
                Err(e) => {
                    tracing::warn!(shard = lease_key, "applying committed state failed, trying again in {wait:?}: {}", store.error("TransactWriteItems (state log)", e));
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
    if !store.unmark(lease_key, Some(owner), PENDING, &marker).await? {
        return Ok(false);
    }
    discard_log(store, lease_key, pending).await;
    Ok(true)
}

/// Deletes `pending`'s log items, then the row's `stateLog` naming
/// them; a delete that fails leaves both, for the next owner.
async fn discard_log(store: &DynamoStore, lease_key: &str, pending: &Pending) {
    let deletes: Vec<WriteRequest> = (0..pending.parts)
        .map(|n| WriteRequest::builder().delete_request(DeleteRequest::builder().key("stateKey", pending.item_key(lease_key, n)).build().expect("key is set")).build())
        .collect();
    for chunk in deletes.chunks(25) {
        let deleted = store.client().batch_write_item().request_items(&pending.table, chunk.to_vec()).send().await;
        let left = match deleted {
            Ok(output) => output.unprocessed_items().map_or(0, |items| items.values().map(Vec::len).sum()),
            Err(e) => {
                tracing::warn!(shard = lease_key, "a state log could not be deleted (the next owner tries again): {}", store.error("BatchWriteItem (state log)", e));
                return;
            }
        };
        if left > 0 {
            tracing::warn!(shard = lease_key, "{left} state log items were not deleted (the next owner tries again)");
            return;
        }
    }
    if let Err(e) = store.unmark(lease_key, None, LOG, &pending.marker()).await {
        tracing::warn!(shard = lease_key, "the lease row still names a deleted state log: {e}");
    }
}

fn malformed(message: String) -> LeaseError {
    LeaseError::Aws(AwsError::Service { operation: "GetItem (state log)", code: "MalformedStateLog".into(), message })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(n: usize, value_bytes: usize) -> StateChanges {
        (0..n).map(|i| (format!("key-{i:05}"), (i % 7 != 0).then(|| vec![i as u8; value_bytes]))).collect()
    }

    #[test]
    fn a_log_decodes_to_the_changes_it_encodes_and_keeps_each_item_under_its_size() {
        for (n, bytes) in [(1, 0), (250, 100), (40, 100_000)] {
            let changes = changes(n, bytes);
            let payloads = encode(&changes);
            assert!(payloads.iter().all(|p| p.len() <= LOG_ITEM_BYTES + 9 + 10 + bytes), "{n} × {bytes}");
            assert_eq!(decode(&payloads).unwrap(), changes);
        }
        assert!(decode(&[vec![0, 0, 0, 9, b'k']]).unwrap_err().contains("ends inside"));
    }

    #[test]
    fn groups_fit_a_transaction_and_hold_every_change_once() {
        let many = changes(250, 10);
        let parts = groups(&many);
        assert_eq!(parts.iter().map(StateChanges::len).collect::<Vec<_>>(), vec![99, 99, 52]);
        assert!(parts.iter().all(fits_one_transaction));
        let big = changes(40, 300_000);
        assert!(!fits_one_transaction(&big));
        assert!(groups(&big).iter().all(fits_one_transaction));
        assert_eq!(groups(&big).iter().map(StateChanges::len).sum::<usize>(), 40);
    }

    #[test]
    fn the_marker_names_the_table_token_and_parts() {
        let pending = Pending { table: "orders-app-KclHostState".into(), token: "ab12".into(), parts: 3 };
        let parsed = Pending::parse(&pending.marker()).unwrap();
        assert_eq!((parsed.table.as_str(), parsed.token.as_str(), parsed.parts), ("orders-app-KclHostState", "ab12", 3));
        assert!(Pending::parse("").is_none());
    }
}
