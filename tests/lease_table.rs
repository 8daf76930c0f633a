//! The lease table against a real DynamoDB API (dynalite): rows as the Java
//! KCL 2.x writes them are read, continued and not damaged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use kcl_host::lease::coordinator::{CheckpointFailure, Coordinator};
use kcl_host::lease::dynamo::DynamoStore;
use kcl_host::lease::rules::TakeSettings;
use kcl_host::lease::{Checkpoint, LeaseStore};
use kcl_host::records::Position;
use kcl_testkit::{clients, unique};

type Item = HashMap<String, AttributeValue>;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Rows as a Java KCL 2.x worker leaves them, with attributes kcl-host does
/// not model (`pendingCheckpoint`, `throughputKBps`).
fn java_rows() -> Vec<Item> {
    vec![
        Item::from([
            ("leaseKey".into(), s("shardId-000000000000")),
            ("leaseOwner".into(), s("java-worker-1")),
            ("leaseCounter".into(), n(17)),
            ("checkpoint".into(), s("49590338271490256608559692538361571095921575989136588898")),
            ("checkpointSubSequenceNumber".into(), n(0)),
            ("ownerSwitchesSinceCheckpoint".into(), n(3)),
            ("startingHashKey".into(), s("0")),
            ("endingHashKey".into(), s("340282366920938463463374607431768211455")),
            ("pendingCheckpoint".into(), s("49590338271490256608559692538361571095921575989136588999")),
            ("throughputKBps".into(), AttributeValue::N("12.5".into())),
        ]),
        Item::from([
            ("leaseKey".into(), s("shardId-000000000001")),
            ("leaseOwner".into(), s("java-worker-1")),
            ("leaseCounter".into(), n(40)),
            ("checkpoint".into(), s("SHARD_END")),
            ("checkpointSubSequenceNumber".into(), n(0)),
            ("ownerSwitchesSinceCheckpoint".into(), n(0)),
            ("childShardIds".into(), AttributeValue::Ss(vec!["shardId-000000000002".into(), "shardId-000000000003".into()])),
        ]),
        // Not a lease kcl-host can read: reported, skipped, never rewritten.
        Item::from([
            ("leaseKey".into(), s("shardId-broken")),
            ("leaseCounter".into(), s("seventeen")),
            ("checkpoint".into(), s("TRIM_HORIZON")),
        ]),
    ]
}

/// A new lease table (named after `name`) holding `rows` as another
/// program wrote them: its name and its store.
async fn table_of(dynamodb: &aws_sdk_dynamodb::Client, name: &str, rows: impl IntoIterator<Item = Item>) -> (String, Arc<DynamoStore>) {
    let table = unique(name);
    let store = Arc::new(DynamoStore::new(dynamodb.clone(), &table));
    store.ensure_table().await.unwrap();
    for row in rows {
        dynamodb.put_item().table_name(&table).set_item(Some(row)).send().await.unwrap();
    }
    (table, store)
}

/// Java KCL's first row after a graceful shutdown released it.
fn released_java_lease() -> Item {
    let mut row = java_rows()[0].clone();
    row.remove("leaseOwner");
    row
}

async fn get(dynamodb: &aws_sdk_dynamodb::Client, table: &str, key: &str) -> Item {
    dynamodb
        .get_item()
        .table_name(table)
        .key("leaseKey", s(key))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("row exists")
}

#[tokio::test]
async fn a_java_kcl_table_is_read_continued_and_not_damaged() {
    let aws = clients().await;
    let (table, store) = table_of(&aws.dynamodb, "java-table", java_rows()).await;

    let leases = store.list().await.unwrap();
    let keys: BTreeSet<&str> = leases.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, BTreeSet::from(["shardId-000000000000", "shardId-000000000001"]), "the broken row is skipped");
    let finished = leases.iter().find(|l| l.key == "shardId-000000000001").unwrap();
    assert_eq!(finished.checkpoint, Checkpoint::ShardEnd);
    assert_eq!(finished.children.len(), 2);

    // The Java worker is gone: its lease expires one failover time after this
    // worker first sees it unchanged, and not before.
    let failover_time = Duration::from_millis(300);
    let settings = TakeSettings { failover_time, ..Default::default() };
    let mut coordinator = Coordinator::new(store.clone(), "kcl-host-1", settings);
    assert!(coordinator.take_pass().await.unwrap().taken.is_empty(), "a live-looking lease is not taken");
    tokio::time::sleep(failover_time).await;
    let taken = coordinator.take_pass().await.unwrap().taken;
    assert_eq!(taken.len(), 1, "the finished lease is not taken");
    let held = &taken[0];
    assert_eq!(held.key(), "shardId-000000000000");
    let next = Position::new("49590338271490256608559692538361571095921575989136589000", 0).unwrap();
    held.checkpoint(Checkpoint::At(next.clone()), &BTreeSet::new()).await.unwrap();

    let row = get(&aws.dynamodb, &table, "shardId-000000000000").await;
    assert_eq!(row["leaseOwner"], s("kcl-host-1"));
    assert_eq!(row["leaseCounter"], n(19), "one bump to take, one to checkpoint");
    assert_eq!(row["checkpoint"], s(next.sequence_number()));
    assert_eq!(row["checkpointSubSequenceNumber"], n(0));
    assert_eq!(row["ownerSwitchesSinceCheckpoint"], n(0));
    let java = &java_rows()[0];
    for kept in ["pendingCheckpoint", "throughputKBps", "startingHashKey", "endingHashKey"] {
        assert_eq!(row[kept], java[kept], "{kept} survives");
    }
    assert_eq!(get(&aws.dynamodb, &table, "shardId-broken").await, java_rows()[2], "the broken row is untouched");
    assert_eq!(get(&aws.dynamodb, &table, "shardId-000000000001").await, java_rows()[1], "the finished lease is untouched");
}

#[tokio::test]
async fn a_checkpoint_after_losing_the_lease_is_refused() {
    let aws = clients().await;
    let (table, store) = table_of(&aws.dynamodb, "fenced-table", [released_java_lease()]).await;

    let mut ours = Coordinator::new(store.clone(), "kcl-host-1", TakeSettings::default());
    let held = ours.take_pass().await.unwrap().taken.pop().unwrap();
    assert!(held.is_valid(), "still within our failover time");
    // Another worker, with a failover time of zero, deems it expired and takes it.
    let impatient = TakeSettings { failover_time: Duration::ZERO, ..Default::default() };
    let mut theirs = Coordinator::new(store.clone(), "kcl-host-2", impatient);
    assert_eq!(theirs.take_pass().await.unwrap().taken.len(), 1);

    let position = Position::new("49590338271490256608559692538361571095921575989136589000", 0).unwrap();
    assert_eq!(held.checkpoint(Checkpoint::At(position), &BTreeSet::new()).await, Err(CheckpointFailure::LeaseLost));
    let row = get(&aws.dynamodb, &table, "shardId-000000000000").await;
    assert_eq!(row["checkpoint"], java_rows()[0]["checkpoint"], "the stale worker moved nothing");
    assert_eq!(row["leaseOwner"], s("kcl-host-2"));
}

/// Turns the first successful UpdateItem answer into a 500, as a lost
/// answer would look: the SDK retries a write that was already applied.
#[derive(Debug, Default)]
struct LoseFirstWriteAnswer(std::sync::atomic::AtomicBool);

impl aws_sdk_dynamodb::config::Intercept for LoseFirstWriteAnswer {
    fn name(&self) -> &'static str {
        "LoseFirstWriteAnswer"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let response = context.response_mut();
        if response.status().is_success() && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            *response.status_mut() = 500.try_into().unwrap();
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_retried_write_that_was_applied_is_not_a_lost_lease() {
    let aws = clients().await;
    let table = unique("retried-write");
    let plain = DynamoStore::new(aws.dynamodb.clone(), &table);
    plain.ensure_table().await.unwrap();
    plain.create(&kcl_host::lease::Lease::new("s0", Checkpoint::TrimHorizon, BTreeSet::new())).await.unwrap();
    let taken = plain.take(&plain.list().await.unwrap()[0], "me", Some(3)).await.unwrap().expect("taken");
    assert_eq!(taken.owner_heartbeat, Some(3), "the take records the owner's heartbeat");

    let config = aws.dynamodb.config().to_builder().interceptor(LoseFirstWriteAnswer::default()).build();
    let lossy = DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), &table);
    let renewed = lossy.renew(&taken, Some(4)).await.unwrap();
    let renewed = renewed.expect("our own applied write is recognised, not taken for a lost lease");
    assert_eq!(renewed.counter, taken.counter + 1);
    assert_eq!((renewed.owner.as_deref(), renewed.owner_heartbeat), (Some("me"), Some(4)));
    // Someone else's write is still a lost race; a taker without a heartbeat leaves none recorded.
    let stolen = plain.take(&renewed, "other", None).await.unwrap().expect("stolen");
    assert!(plain.renew(&renewed, Some(5)).await.unwrap().is_none());
    let row = &plain.list().await.unwrap()[0];
    assert_eq!((&row.owner, row.owner_heartbeat), (&stolen.owner, None));
}

#[tokio::test]
async fn a_table_that_is_not_a_lease_table_is_refused_by_name() {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    let aws = clients().await;
    let table = unique("orders-table");
    aws.dynamodb
        .create_table()
        .table_name(&table)
        .key_schema(KeySchemaElement::builder().attribute_name("orderId").key_type(KeyType::Hash).build().unwrap())
        .attribute_definitions(
            AttributeDefinition::builder().attribute_name("orderId").attribute_type(ScalarAttributeType::S).build().unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let err = DynamoStore::new(aws.dynamodb.clone(), &table).ensure_table().await.unwrap_err().to_string();
    assert!(err.contains("keyed by `orderId` (HASH)"), "{err}");
    assert!(err.contains("--application names the lease table"), "{err}");
}

#[tokio::test]
async fn a_deployed_component_larger_than_an_item_comes_back_whole_and_goes() {
    use kcl_host::swap::store::{ComponentStore, CHUNK};
    let aws = clients().await;
    let store = ComponentStore::new(aws.dynamodb.clone(), &unique("components"));
    store.ensure().await.unwrap();
    // Three rows' worth, not a multiple of a row: what a 1 MB Go processor takes.
    let bytes: Vec<u8> = (0..CHUNK * 2 + 12_345).map(|i| (i * 31 % 251) as u8).collect();
    store.put("9f2c1ab3d4e5", &bytes).await.unwrap();
    assert_eq!(store.get("9f2c1ab3d4e5").await.unwrap().as_deref(), Some(bytes.as_slice()));
    assert_eq!(store.get("000000000000").await.unwrap(), None, "a hash never stored");
    let source = store.source("9f2c1ab3d4e5");
    assert_eq!(store.hash_in(&source), Some("9f2c1ab3d4e5"));
    assert_eq!(store.hash_in("/opt/processors/v2.wasm"), None, "a path is not in the table");
    store.remove("9f2c1ab3d4e5").await.unwrap();
    assert_eq!(store.get("9f2c1ab3d4e5").await.unwrap(), None);
}

/// A lease row as Java KCL 3.x writes it: marked `entityType` `LEASE`, and
/// naming the owner a graceful handoff in flight moves it from.
fn kcl3_lease() -> Item {
    let mut row = released_java_lease();
    row.insert("entityType".into(), s("LEASE"));
    row.insert("checkpointOwner".into(), s("java-3-old"));
    row
}

#[tokio::test]
async fn java_kcl_3_rows_are_left_alone_their_leases_read_and_their_workers_counted() {
    let aws = clients().await;
    let kcl3_rows = [
        Item::from([("leaseKey".into(), s("Leader")), ("entityType".into(), s("LEADER")), ("leaderWorkerId".into(), s("java-3"))]),
        Item::from([("leaseKey".into(), s("Migration3.0")), ("entityType".into(), s("CLIENT_VERSION_MIGRATION")), ("cv".into(), s("CLIENT_VERSION_3x"))]),
        Item::from([("leaseKey".into(), s("java-3")), ("entityType".into(), s("WORKER_METRIC_STATS")), ("lut".into(), n(1_700_000_000))]),
    ];
    let (table, store) = table_of(&aws.dynamodb, "kcl3-table", kcl3_rows.iter().cloned().chain([kcl3_lease()])).await;
    let scan = store.scan().await.unwrap();
    assert_eq!(scan.leases.iter().map(|l| l.key.as_str()).collect::<Vec<_>>(), ["shardId-000000000000"], "its lease reads as a lease");
    assert!(scan.unreadable.is_empty(), "not lease rows that cannot be read: {:?}", scan.unreadable);
    assert_eq!(scan.kcl3_rows, 3);
    assert_eq!(scan.kcl3_workers, BTreeMap::from([("java-3".to_owned(), 1_700_000_000)]), "a worker, with its last report");

    let mut coordinator = Coordinator::new(store.clone(), "kcl-host-1", TakeSettings::default());
    coordinator.cover().heartbeat_written(tokio::time::Instant::now(), 1);
    assert_eq!(coordinator.take_pass().await.unwrap().taken.len(), 1, "a report from 2023 is no live worker: the one lease is this worker's share");
    assert!(!coordinator.liveness().heartbeat_leases(), "a 3.x fleet judges leases by their counters");
    for row in &kcl3_rows {
        let key = match &row["leaseKey"] {
            AttributeValue::S(key) => key.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(&get(&aws.dynamodb, &table, &key).await, row, "{key} untouched");
    }
    let taken = get(&aws.dynamodb, &table, "shardId-000000000000").await;
    assert_eq!(taken["leaseOwner"], s("kcl-host-1"));
    assert_eq!(taken["entityType"], s("LEASE"), "still a lease to 3.x");
    assert!(!taken.contains_key("checkpointOwner"), "no handoff in flight any more, as 3.x's own take leaves it");
}

/// A heartbeat counter never goes back for a worker id, even when its row
/// was deleted in between (a graceful stop, or a dead worker forgotten): a
/// reader that still holds the old counter as dead must not read the
/// restarted worker's new lease rows as older than it.
#[tokio::test]
async fn a_heartbeat_counter_moves_on_across_a_deleted_row() {
    let aws = clients().await;
    let control = kcl_host::lease::heartbeat::HeartbeatTable::new(aws.dynamodb.clone(), &unique("counter-app"));
    control.ensure().await.unwrap();
    let running = kcl_host::swap::Version { hash: "abc".into(), source: "/p.wasm".into(), component: None }.report();
    let first = control.beat("w", "pid 1", true, &running).await.unwrap().expect("written");
    let second = control.beat("w", "pid 1", false, &running).await.unwrap().expect("written");
    assert_eq!(second, first + 1);
    assert_eq!(control.beat("w", "pid 2", false, &running).await.unwrap(), None, "another process's row");
    control.leave("w", "pid 1").await.unwrap();
    let restarted = control.beat("w", "pid 2", true, &running).await.unwrap().expect("written");
    assert!(restarted > second, "{restarted} after {second}");
}

/// The test kit's moto (`servers.sh start --kcl3`) answers one request at a
/// time: a `PutItem` made while transactions on the same table fail their
/// conditions survives (moto's threaded server alone rolls a failed
/// transaction back by restoring the whole table, wiping such writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_the_kits_moto_a_put_racing_failed_transactions_survives() {
    use aws_sdk_dynamodb::types::{Put, ScalarAttributeType, TransactWriteItem};
    use kcl_host::aws::patient;
    let aws = kcl_testkit::java_kcl3::clients().await;
    let table = unique("moto-race");
    kcl_testkit::create_table(&aws.dynamodb, &table, &[("k", ScalarAttributeType::S)]).await;
    aws.dynamodb.put_item().table_name(&table).item("k", s("taken")).send().await.unwrap();
    // A table of some size: moto copies the tables a transaction touches.
    for chunk in (0..1000).collect::<Vec<_>>().chunks(25) {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        let writes = chunk.iter().map(|i| WriteRequest::builder().put_request(PutRequest::builder().item("k", s(&format!("old-{i}"))).build().unwrap()).build()).collect();
        aws.dynamodb.batch_write_item().request_items(&table, writes).send().await.unwrap();
    }
    // Transactions that always fail their condition (the item exists), beside puts of new keys.
    let failing = (0..20).map(|i| {
        let (dynamodb, table) = (aws.dynamodb.clone(), table.clone());
        tokio::spawn(async move {
            let put = |key: String| {
                let put = Put::builder().table_name(&table).item("k", s(&key)).condition_expression("attribute_not_exists(k)").build().unwrap();
                TransactWriteItem::builder().put(put).build()
            };
            let mut items: Vec<TransactWriteItem> = (0..24).map(|n| put(format!("tx-{i}-{n}"))).collect();
            items.push(put("taken".into()));
            let sent = dynamodb.transact_write_items().set_transact_items(Some(items)).customize().config_override(patient()).send().await;
            assert!(sent.unwrap_err().into_service_error().is_transaction_canceled_exception(), "the condition on `taken` fails");
        })
    });
    let puts = (0..40).map(|i| {
        let (dynamodb, table) = (aws.dynamodb.clone(), table.clone());
        tokio::spawn(async move { dynamodb.put_item().table_name(&table).item("k", s(&format!("put-{i}"))).customize().config_override(patient()).send().await.unwrap() })
    });
    let (failing, puts): (Vec<_>, Vec<_>) = (failing.collect(), puts.collect());
    for task in failing {
        task.await.unwrap();
    }
    for task in puts {
        task.await.unwrap();
    }
    let scan = aws.dynamodb.scan().table_name(&table).consistent_read(true).send().await.unwrap();
    let keys: BTreeSet<String> = scan.items().iter().filter_map(|item| item.get("k")?.as_s().ok().cloned()).collect();
    let lost: Vec<String> = (0..40).map(|i| format!("put-{i}")).filter(|k| !keys.contains(k)).collect();
    assert!(lost.is_empty(), "puts wiped by a racing transaction's rollback: {lost:?}");
    assert!(keys.iter().all(|k| !k.starts_with("tx-")), "a failed transaction wrote nothing: {keys:?}");
}
