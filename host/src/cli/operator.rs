//! The flags of the commands an operator reads tables with: `status`,
//! `dashboard` and `state`, and the account they read.

use clap::{Args, Subcommand};

/// `kcl-host status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Application name (the lease table).
    #[arg(long, env = "KCL_HOST_APPLICATION")]
    pub application: String,
    /// Print JSON for scripts instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Refresh every interval, like 2s, until interrupted.
    #[arg(long)]
    pub watch: Option<String>,
    /// Also show how far each checkpoint is behind the shard's tip (reads Kinesis; a single-stream table needs --stream).
    #[arg(long)]
    pub lag: bool,
    /// Also show each shard's processor state: keys and bytes (scans the whole state table).
    #[arg(long)]
    pub state: bool,
    /// The stream of a single-stream table, for --lag (a multi-stream table's keys name theirs).
    #[arg(long, env = "KCL_HOST_STREAM")]
    pub stream: Option<String>,
    /// A heartbeat older than this counts as stopped (the workers' --failover-time) [default: 10s].
    #[arg(long, env = "KCL_HOST_FAILOVER_TIME", allow_hyphen_values = true)]
    pub failover_time: Option<String>,
    /// Where and as whom to call AWS.
    #[command(flatten)]
    pub aws: AccountArgs,
}

/// `kcl-host dashboard`.
#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// Application name (the lease table).
    #[arg(long, env = "KCL_HOST_APPLICATION")]
    pub application: String,
    /// Where to serve the page: a loopback address unless others must see it.
    #[arg(long, env = "KCL_HOST_DASHBOARD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Also show each shard's processor state: keys and bytes (scans the whole state table at each refresh).
    #[arg(long)]
    pub state: bool,
    /// A heartbeat older than this counts as stopped (the workers' --failover-time) [default: 10s].
    #[arg(long, env = "KCL_HOST_FAILOVER_TIME", allow_hyphen_values = true)]
    pub failover_time: Option<String>,
    /// Where and as whom to call AWS.
    #[command(flatten)]
    pub aws: AccountArgs,
}

/// `kcl-host state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// What to read.
    #[command(subcommand)]
    pub action: StateAction,
    /// Application name (the state table is <application>-KclHostState).
    #[arg(long, env = "KCL_HOST_APPLICATION")]
    pub application: String,
    /// Where and as whom to call AWS.
    #[command(flatten)]
    pub aws: AccountArgs,
}

/// `kcl-host state get` or `dump`.
#[derive(Debug, Subcommand)]
pub enum StateAction {
    /// One key's value.
    Get {
        /// The stream whose state it is.
        #[arg(long, env = "KCL_HOST_STREAM")]
        stream: String,
        /// The key.
        #[arg(long)]
        key: String,
    },
    /// Every key (of one stream, with --stream), with the shard and checkpoint that wrote it.
    Dump {
        /// Only this stream's keys.
        #[arg(long, env = "KCL_HOST_STREAM")]
        stream: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

impl From<StateAction> for crate::state::command::StateRead {
    fn from(action: StateAction) -> Self {
        match action {
            StateAction::Get { stream, key } => Self::Get { stream, key },
            StateAction::Dump { stream, json } => Self::Dump { stream, json },
        }
    }
}

/// Which AWS account and region the table commands read; endpoints come
/// from the standard chain (AWS_ENDPOINT_URL_*).
#[derive(Debug, Args)]
pub struct AccountArgs {
    /// AWS region (else AWS_REGION or the profile's).
    #[arg(long, env = "KCL_HOST_REGION")]
    pub region: Option<String>,
    /// AWS profile (else AWS_PROFILE).
    #[arg(long, env = "KCL_HOST_PROFILE")]
    pub profile: Option<String>,
}

impl AccountArgs {
    /// These flags as the AWS settings.
    pub fn settings(&self) -> crate::aws::AwsSettings {
        crate::aws::AwsSettings { region: self.region.clone(), profile: self.profile.clone(), ..Default::default() }
    }
}
