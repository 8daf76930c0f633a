//! A small Kinesis/DynamoDB tool for the demo, against the same endpoints as
//! kcl-host (the standard AWS variables).
//!
//!   streamctl create STREAM SHARDS
//!   streamctl put STREAM SHARD-ID PREFIX COUNT
//!   streamctl split STREAM SHARD-ID
//!   streamctl shards STREAM
//!   streamctl leases TABLE

use kcl_testkit::{clients, leases, TestStream};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let aws = clients().await;
    let stream = |name: &str| TestStream { name: name.to_owned(), kinesis: aws.kinesis.clone() };
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["create", name, shards] => {
            TestStream::create(&aws.kinesis, name, shards.parse().expect("SHARDS is a number")).await;
            println!("created stream {name} with {shards} shard(s)");
        }
        ["put", name, shard, prefix, count] => {
            let payloads: Vec<String> = (0..count.parse().expect("COUNT is a number")).map(|i| format!("{prefix}-{i}")).collect();
            stream(name).put(shard, &payloads).await;
            println!("wrote {count} records to {shard}");
        }
        ["split", name, shard] => {
            let children = stream(name).split(shard).await;
            println!("split {shard} into {}", children.join(" and "));
        }
        ["shards", name] => {
            for shard in stream(name).shards().await {
                let parents: Vec<_> = shard.parents.into_iter().collect();
                println!("{}  {}  parents: {}", shard.id, if shard.closed { "closed" } else { "open  " }, parents.join(", "));
            }
        }
        ["leases", table] => {
            println!("{:<22} {:<14} {:>7}  {:<24} parents -> children", "leaseKey", "leaseOwner", "counter", "checkpoint");
            for lease in leases(&aws.dynamodb, table).await {
                let mut checkpoint = lease.checkpoint.to_string();
                if checkpoint.len() > 24 {
                    checkpoint = format!("{}…", &checkpoint[..23]);
                }
                let set = |s: &std::collections::BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(",");
                println!(
                    "{:<22} {:<14} {:>7}  {:<24} [{}] -> [{}]",
                    lease.key,
                    lease.owner.as_deref().unwrap_or("-"),
                    lease.counter,
                    checkpoint,
                    set(&lease.parents),
                    set(&lease.children)
                );
            }
        }
        _ => {
            eprintln!("usage: streamctl create STREAM SHARDS | put STREAM SHARD PREFIX COUNT | split STREAM SHARD | shards STREAM | leases TABLE");
            std::process::exit(2);
        }
    }
}
