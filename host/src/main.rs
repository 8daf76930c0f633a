use std::fs::File;
use std::io::BufReader;
use std::process::ExitCode;

use clap::Parser;
use kcl_host::aws::{AwsClients, AwsError, Service};
use kcl_host::cli::{Cli, Command, DeployArgs, LogFormat, ReplayArgs, RunArgs, StatusArgs};
use kcl_host::config::{duration, Layer, WorkerConfig};
use kcl_host::replay::{self, ReplayReport};
use kcl_host::failure::DeadLetters;
use kcl_host::output::Outputs;
use kcl_host::runtime::ShardInfo;
use kcl_host::runtime::{Processor, Runtime, RuntimeConfig};
use kcl_host::swap::Swapper;
use tracing::Instrument;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| exit_naming_the_variable(e));
    // The SDK's look for a region in EC2 instance metadata warns three times before our own
    // "no AWS region" says what to do: kept quiet unless RUST_LOG asks.
    // `deploy`'s test instance is not a shard: its processor's lines are not the operator's business.
    let quiet = if matches!(cli.command, Command::Deploy(_)) { ",kcl_host::guest=warn" } else { "" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("info,aws_config::imds::region=error{quiet}")));
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => log.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        // Flat: the event's fields, and the worker's span's (`worker`) under `span`.
        LogFormat::Json => log.json().flatten_event(true).with_current_span(true).with_span_list(false).init(),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("starting tokio");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Replay(args) => run_replay(args).await,
            Command::Run(args) => run_worker(*args).await,
            Command::Status(args) => run_status(args).await,
            Command::Deploy(args) => run_deploy(args).await,
            Command::Init(args) => {
                let sdk = args.sdk.as_deref().map_or(kcl_host::init::Sdk::Bundled, kcl_host::init::Sdk::Checkout);
                let files = kcl_host::init::create(&args.name, args.lang, sdk).map_err(|e| e.to_string())?;
                for file in files {
                    println!("created {}", file.display());
                }
                println!("next: see {}", args.name.join("README.md").display());
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Exits with clap's message for `error`; when the bad value came from a
/// `KCL_HOST_*` variable rather than the flag, the message names the variable.
fn exit_naming_the_variable(error: clap::Error) -> ! {
    use clap::error::{ContextKind, ContextValue};
    let flag = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.split_whitespace().next().unwrap_or_default().to_owned(),
        _ => error.exit(),
    };
    let given_as_flag = std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
    let variable = format!("KCL_HOST_{}", flag.trim_start_matches('-').replace('-', "_").to_uppercase());
    match std::env::var(&variable) {
        Ok(value) if !given_as_flag && flag.starts_with("--") => {
            let reason = error.to_string();
            let reason = reason.lines().next().unwrap_or_default().trim_start_matches("error: ");
            eprintln!("error: {variable}={value:?} is not valid ({reason}); fix or unset the variable");
            std::process::exit(2);
        }
        _ => error.exit(),
    }
}

async fn run_replay(args: ReplayArgs) -> Result<(), String> {
    let records = if args.input.as_os_str() == "-" {
        replay::read_records(std::io::stdin().lock())
    } else {
        let file = File::open(&args.input)
            .map_err(|e| format!("cannot open input `{}`: {e}", args.input.display()))?;
        replay::read_records(BufReader::new(file))
    }
    .map_err(|e| format!("{}: {e}", args.input.display()))?;

    let config = RuntimeConfig { max_instances: 2, ..args.runtime.config().map_err(|e| e.to_string())? };
    let (outputs, buffer) = args.runtime.layer().outputs().map_err(|e| e.to_string())?;
    let outputs = Outputs::printed(&outputs, buffer);
    let settings = args.runtime.layer().failure().map_err(|e| e.to_string())?;
    let dead_letters = DeadLetters::printed(&settings, &args.stream);
    let runtime = Runtime::new(config).map_err(|e| format!("cannot start wasmtime: {e}"))?;
    let processor = Processor::load(&runtime, &args.processor).await.map_err(|e| e.to_string())?;
    let shard = ShardInfo::new(args.stream, args.shard_id);
    let policy = replay::ReplayPolicy { settings: &settings, dead_letters: &dead_letters };
    match replay::replay(&processor, shard, records, args.batch_size as usize, true, &outputs, Some(policy)).await {
        Ok(report) => {
            print_summary(&report);
            Ok(())
        }
        Err(failure) => {
            print_summary(&failure.report);
            Err(failure.to_string())
        }
    }
}

async fn run_worker(args: RunArgs) -> Result<(), String> {
    let file = match &args.config {
        Some(path) => Layer::from_file(path).map_err(|e| e.to_string())?,
        None => Layer::default(),
    };
    let config = WorkerConfig::resolve(args.layer().over(file)).map_err(|e| e.to_string())?;
    let shutdown = shutdown_signal();
    let runtime = Runtime::new(config.runtime.clone()).map_err(|e| format!("cannot start wasmtime: {e}"))?;
    let processor = Processor::load(&runtime, &args.processor).await.map_err(|e| e.to_string())?;
    let clients = AwsClients::from_env(&config.aws).await.map_err(|e| e.to_string())?;
    let region = clients.kinesis.config().region().map(ToString::to_string).unwrap_or_default();
    tracing::info!(
        "worker {} consuming stream `{}` with {} {} (lease table `{}`, new shards from {:?}, failover {:?})",
        config.worker_id,
        config.stream,
        args.processor.display(),
        processor.describe(),
        config.application,
        config.initial_position,
        config.take.failover_time,
    );
    let aws = config.aws.clone();
    let requests = clients.requests.clone();
    let mut swapper = Swapper::new(runtime.clone(), processor, &args.processor);
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
    let summary = kcl_host::worker::run(config, clients, swapper, shutdown).instrument(span).await.map_err(|e| match e.aws() {
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

async fn run_deploy(args: DeployArgs) -> Result<(), String> {
    let clients = AwsClients::from_env(&args.aws.settings()).await.map_err(|e| e.to_string())?;
    let message = kcl_host::swap::fleet::deploy(&clients.dynamodb, &args.application, args.processor.as_deref()).await?;
    println!("{message}");
    Ok(())
}

async fn run_status(args: StatusArgs) -> Result<(), String> {
    let clients = AwsClients::from_env(&args.aws.settings()).await.map_err(|e| e.to_string())?;
    let default_failover = kcl_host::lease::rules::TakeSettings::default().failover_time;
    let failover = duration("failover_time", args.failover_time.as_deref(), default_failover).map_err(|e| e.to_string())?;
    let every = match &args.watch {
        Some(text) => Some(duration("watch", Some(text), Default::default()).map_err(|e| e.to_string())?),
        None => None,
    };
    loop {
        let mut report = kcl_host::status::read(&clients, &args.application, failover).await.map_err(|e| e.to_string())?;
        if let (true, Some(stream)) = (args.lag, &args.stream) {
            kcl_host::status::add_lag(&mut report, &clients, stream).await.map_err(|e| e.to_string())?;
        }
        let text = if args.json {
            serde_json::to_string_pretty(&report).expect("the report serializes")
        } else {
            kcl_host::status::render(&report)
        };
        let Some(every) = every else {
            println!("{text}");
            return Ok(());
        };
        // Clear the terminal and draw again, until interrupted.
        print!("\x1b[2J\x1b[H{text}");
        tokio::time::sleep(every).await;
    }
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

fn print_summary(report: &ReplayReport) {
    let secs = report.elapsed.as_secs_f64();
    let rate = if secs > 0.0 { report.records as f64 / secs } else { 0.0 };
    println!(
        "replayed {} records in {} batches in {:.1} ms ({:.0} records/s); {} checkpoints, last {}",
        report.records,
        report.batches,
        secs * 1e3,
        rate,
        report.checkpoints.len(),
        report.checkpoints.last().map_or("none", String::as_str),
    );
    if report.given_up > 0 {
        println!("gave up on {} records", report.given_up);
    }
}
