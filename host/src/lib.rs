//! kcl-host: consume Amazon Kinesis the way the Kinesis Client Library does,
//! with each shard's processor a sandboxed WebAssembly component.
//!
//! - [`records`]: batches of Kinesis records as columns, KPL aggregates, positions.
//! - [`runtime`]: wasmtime, components, one sandboxed instance per shard.
//! - [`replay`]: a processor's lifecycle on records from a file.
//! - [`cli`]: command-line parsing.

#![warn(missing_docs)]

pub mod admin;
pub mod aws;
pub mod backoff;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dashboard;
pub mod failure;
pub mod fanout;
pub mod fetch;
pub mod hedge;
pub mod http;
pub mod iam;
pub mod init;
pub mod lease;
pub mod metrics;
pub mod output;
pub mod records;
pub mod replay;
pub mod runtime;
pub mod shard;
pub mod source;
pub mod state;
pub mod status;
pub mod stream;
pub mod swap;
pub mod worker;

/// The version every `kcl-host` output names (`--version`, the start line,
/// the `build_info` metric): the crate's, the commit it was built from, and
/// the `kcl:processor` contract versions it loads.
pub fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let mut contracts: Vec<&str> = runtime::contract_versions().collect();
        contracts.sort();
        format!("{} (commit {}, contracts kcl:processor {})", env!("CARGO_PKG_VERSION"), env!("KCL_HOST_COMMIT"), contracts.join(", "))
    });
    &VERSION
}
