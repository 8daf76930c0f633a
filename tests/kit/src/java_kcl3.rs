//! A Java KCL 3.5.1 worker (`tests/java-kcl3`) and a DynamoDB Streams
//! Kinesis Adapter worker (`tests/java-ddb-adapter`), both built by
//! `scripts/build-java-kcl3.sh`, as child processes, and clients for the
//! DynamoDB server they run against (moto, from `scripts/servers.sh start
//! --kcl3`: dynalite cannot host 3.x's lease table).

use std::path::PathBuf;

use kcl_host::aws::{AwsClients, AwsSettings};

use crate::process::KclHost;

/// The DynamoDB endpoint Java KCL 3.x can use; panics with the fix when
/// that server is not running.
pub fn dynamodb_endpoint() -> String {
    std::env::var("KCL3_DYNAMODB_ENDPOINT").unwrap_or_else(|_| {
        panic!("KCL3_DYNAMODB_ENDPOINT is not set: start the servers with `scripts/servers.sh start --kcl3` and `source .servers/env`")
    })
}

/// Clients for the local Kinesis server and the DynamoDB at [`dynamodb_endpoint`].
pub async fn clients() -> AwsClients {
    crate::clients().await;
    let settings = AwsSettings { dynamodb_endpoint: Some(dynamodb_endpoint()), ..AwsSettings::default() };
    AwsClients::from_env(&settings).await.expect("clients for the local servers")
}

/// Starts a Java KCL 3.x worker `worker` of `application` on `stream`,
/// judging leases by `failover_ms` as kcl-host's `--failover-time` does.
/// It logs each record as kcl-host's counter example does, so
/// [`KclHost::delivered`] reads it (processor `java-kcl-3.5.1`).
pub fn spawn(stream: &str, application: &str, worker: &str, failover_ms: u64) -> KclHost {
    spawn_java("java-kcl3", "kcl3.Worker", stream, application, worker, failover_ms)
}

/// Starts a worker built on the DynamoDB Streams Kinesis Adapter 2.0.1
/// (`tests/java-ddb-adapter`, Java KCL 3.1.1 under it) on the DynamoDB
/// stream `arn`, as [`spawn`] does. It logs each change as the counter
/// example does, with the item's partition key value as the key
/// (processor `ddb-adapter-2.0.1`).
pub fn spawn_adapter(arn: &str, application: &str, worker: &str, failover_ms: u64) -> KclHost {
    spawn_java("java-ddb-adapter", "adapter.Worker", arn, application, worker, failover_ms)
}

/// Runs `class` of the Maven project `tests/<project>` (built by
/// `scripts/build-java-kcl3.sh`) with the arguments both workers take.
fn spawn_java(project: &str, class: &str, stream: &str, application: &str, worker: &str, failover_ms: u64) -> KclHost {
    let project = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(project);
    let dependencies = std::fs::read_to_string(project.join("target/classpath.txt"))
        .unwrap_or_else(|_| panic!("{} has no build: run scripts/build-java-kcl3.sh first", project.display()));
    let classpath = format!("{}:{}", project.join("target/classes").display(), dependencies.trim());
    let failover = failover_ms.to_string();
    let args = ["-cp", &classpath, class, stream, application, worker, &failover];
    KclHost::spawn_with_env("java".as_ref(), &args, &[("AWS_ENDPOINT_URL_DYNAMODB", &dynamodb_endpoint())])
}
