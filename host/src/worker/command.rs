//! `kcl-host run`: resolves the settings, loads the processor, connects to
//! AWS, follows SIGHUP and `--watch` for new versions, runs the worker until
//! SIGINT or SIGTERM, and logs what it did.

use std::fs::File;
use std::io::BufReader;

use tracing::Instrument;

use crate::aws::{AwsClients, AwsError, Service};
use crate::cli::RunArgs;
use crate::replay;
use crate::runtime::Runtime;
use crate::swap::artifact::{FleetArtifacts, Loader};
use crate::swap::fleet::first_version;
use crate::swap::Swapper;

/// Runs `kcl-host run` to its end; the error says what stopped it.
pub async fn run(args: RunArgs) -> Result<(), String> {
    let config = args.worker_config()?;
    let shutdown = shutdown_signal();
    let runtime = Runtime::new(config.runtime.clone()).map_err(|e| format!("cannot start wasmtime: {e}"))?;
    let clients = AwsClients::from_env(&config.aws).await.map_err(|e| e.to_string())?;
    let loader = Loader::new(runtime, FleetArtifacts::from_env(&clients.dynamodb, &config.application)?);
    let (processor, source) = first_version(&loader, &clients.dynamodb, &config.application, &args.processor).await?;
    if config.window.is_some() {
        processor.check_closes_windows()?;
    }
    let region = clients.kinesis.config().region().map(ToString::to_string).unwrap_or_default();
    let streams: Vec<String> = config
        .streams
        .iter()
        .map(|s| {
            let what = if s.kind == crate::stream::StreamKind::DynamoDbTable { "the stream of DynamoDB table " } else { "" };
            format!("{what}`{}` (new shards from {:?})", s.name, s.initial_position)
        })
        .collect();
    tracing::info!(
        "kcl-host {}: worker {} consuming {} {} with {} {} (lease table `{}`, failover {:?})",
        crate::version(),
        config.worker_id,
        if streams.len() == 1 { "stream" } else { "streams" },
        streams.join(", "),
        source,
        processor.describe(),
        config.application,
        config.take.failover_time,
    );
    let aws = config.aws.clone();
    let requests = clients.requests.clone();
    let mut swapper = Swapper::new(loader, processor, source).closing_windows(config.window.is_some());
    if let Some(path) = &config.swap_canary_input {
        let file = File::open(path).map_err(|e| format!("cannot open --swap-canary-input `{}`: {e}", path.display()))?;
        let records = replay::read_records(BufReader::new(file)).map_err(|e| format!("--swap-canary-input {}: {e}", path.display()))?;
        swapper = swapper.with_canary_input(records, &config.outputs);
    }
    let swapper = std::sync::Arc::new(swapper);
    tokio::spawn(swapper.clone().on_signal(args.processor.clone()));
    if config.watch {
        tokio::spawn(swapper.clone().on_change(args.processor.clone()));
    }
    let span = tracing::info_span!("worker", worker = %config.worker_id);
    let summary = super::run(config, clients, swapper, shutdown).instrument(span).await.map_err(|e| match e.aws() {
        Some(AwsError::Unreachable { service, .. }) => format!("{e}; the endpoint is {}", aws.endpoint_origin(*service)),
        Some(AwsError::StreamNotFound(_)) => format!("{e} (looked in region `{region}` at {})", aws.endpoint_origin(Service::Kinesis)),
        _ => e.to_string(),
    })?;
    let total: u64 = summary.records.values().sum();
    tracing::info!(
        "stopped after {:.1}s: {total} records from {} shards; processed to SHARD_END: {}; processor {}",
        summary.elapsed.as_secs_f64(),
        summary.records.len(),
        if summary.finished.is_empty() { "none".to_owned() } else { summary.finished.join(", ") },
        summary.versions.join(" -> "),
    );
    if summary.dead_lettered + summary.skipped > 0 {
        tracing::info!("records given up on: {} written to --on-failure, {} skipped", summary.dead_lettered, summary.skipped);
    }
    if !summary.outputs.is_empty() {
        let outputs: Vec<String> = summary.outputs.iter().map(|(name, n)| format!("{name}={n}")).collect();
        tracing::info!("outputs written: {}", outputs.join(" "));
    }
    let requests: Vec<String> = requests.snapshot().iter().map(|(op, n)| format!("{op}={n}")).collect();
    tracing::info!("requests sent: {}", requests.join(" "));
    Ok(())
}

/// Resolves on SIGINT or SIGTERM: a graceful stop. A second one stops the
/// process at once — nothing is lost: the next owner of each shard reads
/// again what came after its last checkpoint. The handlers are installed at
/// once, so a signal that arrives during start-up is not lost (nor fatal).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    let mut terminate = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    let (first, mut asked) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        for count in 1.. {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            if count == 1 {
                tracing::info!("stop requested: shutting the processors down (a second SIGINT or SIGTERM stops at once)");
                first.send_replace(true);
            } else {
                tracing::warn!(
                    "stopping at once on a second signal: the leases expire, and their next owners read again \
                     what came after each shard's last checkpoint"
                );
                std::process::exit(130);
            }
        }
    });
    async move {
        let _ = asked.wait_for(|asked| *asked).await;
    }
}

