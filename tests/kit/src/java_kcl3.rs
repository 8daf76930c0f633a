//! A Java KCL 3.5.1 worker (`tests/java-kcl3`, built by
//! `scripts/build-java-kcl3.sh`) as a child process, and clients for the
//! DynamoDB server it runs against (moto, from `scripts/servers.sh start
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
    let project = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../java-kcl3");
    let dependencies = std::fs::read_to_string(project.join("target/classpath.txt"))
        .unwrap_or_else(|_| panic!("{} has no build: run scripts/build-java-kcl3.sh first", project.display()));
    let classpath = format!("{}:{}", project.join("target/classes").display(), dependencies.trim());
    let failover = failover_ms.to_string();
    let args = ["-cp", &classpath, "kcl3.Worker", stream, application, worker, &failover];
    KclHost::spawn_with_env("java".as_ref(), &args, &[("AWS_ENDPOINT_URL_DYNAMODB", &dynamodb_endpoint())])
}
