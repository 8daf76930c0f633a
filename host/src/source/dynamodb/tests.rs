//! The lineage of a DynamoDB stream that rolled over for five generations,
//! played from recorded DescribeStream answers by a local server (moto
//! never closes a shard): each generation's shards go through [`describe`] (its paging
//! included) and the shard sync's plan, while the shards a worker could
//! finish reach `SHARD_END` and finished leases are cleaned up as a worker
//! would. Every shard is leased once, after its parent, and a closed shard
//! is never leased again — also once its lease is deleted and while the
//! stream still lists it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodbstreams::config::{BehaviorVersion, Credentials, Region};
use serde_json::Value;

use super::describe;
use crate::lease::{Checkpoint, Lease};
use crate::records::Position;
use crate::shard::{plan_cleanup, plan_new_leases, InitialPosition};

const ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-12-01T00:00:00.000";

/// A client of a local server (the host's own HTTP/1 loop) that answers
/// DescribeStream with `pages` (a page follows the shard id its request
/// starts after), and counts the calls.
async fn replaying(pages: Vec<Value>, calls: Arc<Mutex<usize>>) -> (aws_sdk_dynamodbstreams::Client, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let pages = Arc::new(pages);
    let server = tokio::spawn(crate::http::serve_http(listener, move |request: hyper::Request<hyper::body::Incoming>, _| {
        let (pages, calls) = (pages.clone(), calls.clone());
        async move {
            *calls.lock().unwrap() += 1;
            let body = http_body_util::BodyExt::collect(request.into_body()).await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["StreamArn"], ARN);
            let page = match body.get("ExclusiveStartShardId").and_then(Value::as_str) {
                None => &pages[0],
                Some(after) => {
                    let i = pages.iter().position(|p| p["StreamDescription"]["LastEvaluatedShardId"] == after).expect("a page ends at the shard asked after");
                    &pages[i + 1]
                }
            };
            crate::http::reply(hyper::StatusCode::OK, "application/x-amz-json-1.0", page.to_string())
        }
    }));
    let config = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
        .endpoint_url(endpoint)
        .build();
    (aws_sdk_dynamodbstreams::Client::from_conf(config), server)
}

#[tokio::test]
async fn five_generations_of_rollover_lease_each_shard_once_after_its_parent() {
    let recorded: Value = serde_json::from_str(include_str!("rollover.json")).unwrap();
    let mut leases: BTreeMap<String, Lease> = BTreeMap::new();
    let mut created: Vec<String> = Vec::new();
    let mut every_shard = BTreeSet::new();
    for generation in recorded["generations"].as_array().unwrap() {
        let pages = generation["pages"].as_array().unwrap().clone();
        let calls = Arc::new(Mutex::new(0));
        let (client, server) = replaying(pages.clone(), calls.clone()).await;
        let (facts, shards) = describe(&client, ARN).await.unwrap();
        server.abort();
        assert_eq!(*calls.lock().unwrap(), pages.len(), "{}: one call a page", generation["note"]);
        assert_eq!((facts.table.as_str(), facts.hash_key.as_str(), facts.view_type.as_str()), ("orders", "pk", "NEW_AND_OLD_IMAGES"));
        every_shard.extend(shards.iter().map(|s| s.id.clone()));

        // The shard sync.
        let current: Vec<&Lease> = leases.values().collect();
        for lease in plan_new_leases(&shards, &current, &InitialPosition::TrimHorizon, |id| id.into()) {
            let key = lease.key.to_string();
            assert!(!created.contains(&key), "{}: {key} is leased again", generation["note"]);
            for parent in &lease.parents {
                assert!(created.contains(parent) || !shards.iter().any(|s| &s.id == parent), "{key} is leased before its parent {parent}");
            }
            assert_eq!(lease.checkpoint, Checkpoint::TrimHorizon, "{key} starts at its first change");
            created.push(key.clone());
            leases.insert(key, lease);
        }

        // A worker takes each lease whose parents are done: a closed shard to SHARD_END, an open one to a checkpoint.
        let unfinished: BTreeSet<String> = leases.values().filter(|l| !l.is_finished()).map(|l| l.key.to_string()).collect();
        for lease in leases.values_mut().filter(|l| !l.is_finished()) {
            if lease.parents.iter().any(|parent| unfinished.contains(parent)) {
                continue;
            }
            let shard = shards.iter().find(|s| s.id == lease.key.as_str()).expect("a leased shard is listed until it finishes");
            if shard.closed {
                lease.checkpoint = Checkpoint::ShardEnd;
                lease.children = shards.iter().filter(|s| s.parents.contains(&shard.id)).map(|s| s.id.clone()).collect();
            } else {
                lease.checkpoint = Checkpoint::At(Position::new("1000", 0).unwrap());
            }
        }
        let all: Vec<Lease> = leases.values().cloned().collect();
        for key in plan_cleanup(&all) {
            leases.remove(key.as_str());
        }
    }
    assert_eq!(created.iter().cloned().collect::<BTreeSet<_>>(), every_shard, "every shard of every generation was leased");
    assert_eq!(created.len(), every_shard.len(), "none twice: {created:?}");
    let left: Vec<&str> = leases.keys().map(String::as_str).collect();
    assert_eq!(left.len(), 3, "the last generation's open shards and their parent wait, the rest was cleaned up: {left:?}");
}
