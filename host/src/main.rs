//! The `kcl-host` command: parses the command line, sets up logging, and
//! hands each subcommand to its room.

use std::process::ExitCode;

use clap::Parser;
use kcl_host::cli::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| exit_naming_the_variable(e));
    // The SDK's look for a region in EC2 instance metadata warns three times before our own
    // "no AWS region" says what to do, and its credential chain once per provider that failed
    // before our "no AWS credentials": kept quiet unless RUST_LOG asks.
    // `deploy`'s test instance is not a shard: its processor's lines are not the operator's business.
    let quiet = if matches!(cli.command, Command::Deploy(_)) { ",kcl_host::guest=warn" } else { "" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("info,aws_config::imds::region=error,aws_config::meta::credentials::chain=error{quiet}")));
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => log.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        // Flat: the event's fields, and the worker's span's (`worker`) under `span`.
        LogFormat::Json => log.json().flatten_event(true).with_current_span(true).with_span_list(false).init(),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("starting tokio");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Replay(args) => kcl_host::replay::command::run(args.command().map_err(|e| e.to_string())?).await,
            Command::Run(args) => kcl_host::worker::command::run(*args).await,
            Command::Status(args) => kcl_host::status::command(args).await,
            Command::Dashboard(args) => kcl_host::dashboard::command(args).await,
            Command::Deploy(args) => kcl_host::swap::fleet::command(&args.aws.settings(), &args.application, args.processor.as_deref()).await,
            Command::State(args) => kcl_host::state::command::command(&args.aws.settings(), &args.application, args.action.into()).await,
            Command::IamPolicy(args) => kcl_host::iam::command(&args),
            Command::Init(args) => {
                let sdk = args.sdk.as_deref().map_or(kcl_host::init::Sdk::Bundled, kcl_host::init::Sdk::Checkout);
                kcl_host::init::command(&args.name, args.lang, sdk)
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
