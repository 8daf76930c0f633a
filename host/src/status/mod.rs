//! `kcl-host status`: the lease table (and the control table's heartbeats)
//! as an operator reads them — per shard its state, owner, checkpoint and
//! counter, per worker its leases — as text that fits 100 columns, or JSON.
//! It reads tables written by Java KCL too: owners without a heartbeat row
//! show as `owned`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::aws::AwsClients;
use crate::cli::StatusArgs;
use crate::config::duration;
use crate::clock;
use crate::fetch::StartingPosition;
use crate::lease::heartbeat::HeartbeatTable;
use crate::metrics::progress::{self, Progress, RolloutReport};
use crate::swap::deploy::{Deployed, Version};
use crate::failure::retrying::Retrying;
use crate::worker::in_flight::InFlight;
use crate::lease::dynamo::DynamoStore;
use crate::lease::rules::{self, is_ready};
use crate::lease::{Checkpoint, LeaseError, LeaseKey, LeaseStore};
use crate::runtime::HOST_KEY_PREFIX;
use crate::state::StateTable;

mod render;
pub use render::render;

/// The state of one shard, as the tables show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Owned by a kcl-host worker whose heartbeat is current.
    Processing,
    /// Processing, but retrying records the processor failed on.
    Retrying,
    /// Owned by a worker without a heartbeat row (Java KCL, say).
    Owned,
    /// Owned by a kcl-host worker whose heartbeat stopped: it will be taken.
    Expired,
    /// Nobody holds it; the next take pass of any worker will.
    Unassigned,
    /// A parent is not at `SHARD_END` yet.
    WaitingForParents,
    /// Processed to its end.
    ShardEnd,
}

impl State {
    fn label(self) -> &'static str {
        match self {
            State::Processing => "processing",
            State::Retrying => "retrying",
            State::Owned => "owned",
            State::Expired => "expired",
            State::Unassigned => "unassigned",
            State::WaitingForParents => "waiting",
            State::ShardEnd => "SHARD_END",
        }
    }
}

/// One shard's lease, as `status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ShardRow {
    /// The lease key: the shard id, or `account:stream:creationEpoch:shardId`.
    pub shard: String,
    /// The stream's name, when the key names one (a multi-stream application).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// Where it stands.
    pub state: State,
    /// Who holds it.
    pub owner: Option<String>,
    /// The `checkpoint` column.
    pub checkpoint: String,
    /// The checkpoint's sub-sequence number.
    pub sub_sequence_number: u64,
    /// `leaseCounter`.
    pub counter: u64,
    /// The shard's parents.
    pub parents: Vec<String>,
    /// With `--lag`: how far the checkpoint is behind the shard's tip.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_ms: Option<u64>,
    /// What its owner's heartbeat says of the records it retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrying: Option<Retrying>,
    /// Its progress on its owner, as the owner's progress row says (a few
    /// seconds old; kcl-host owners only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// With `--parallelism`: its instances' calls, as its owner's heartbeat says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
    /// With `--state`: the processor state the shard owns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_size: Option<StateSize>,
}

/// A shard's processor state, as the state table holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StateSize {
    /// Keys with a value.
    pub keys: u64,
    /// Their keys' and values' bytes.
    pub bytes: u64,
    /// State log items of the shard: a commit of more keys than one
    /// transaction holds while it is applied, else left by a worker that
    /// stopped before committing (the shard's next owner deletes them).
    pub log_items: u64,
}

/// One worker, as `status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerRow {
    /// The worker id.
    pub worker: String,
    /// How many leases it holds.
    pub leases: usize,
    /// Since the worker's last heartbeat; `None` for a worker without one.
    pub heartbeat_age_ms: Option<u64>,
    /// Since a Java KCL 3.x worker last updated its metrics row
    /// (`WORKER_METRIC_STATS`, whole seconds); `None` for other workers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kcl3_report_age_ms: Option<u64>,
    /// The processor it runs, as its heartbeat reports it: the hash, with
    /// `(name@version)` when the component has them.
    pub processor: Option<String>,
    /// Its rollout of a new version (canary, probation, versions rolled
    /// back), as its progress row reports it; absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutReport>,
}

/// What `kcl-host status` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The application.
    pub application: String,
    /// Every lease.
    pub shards: Vec<ShardRow>,
    /// Every worker that holds a lease, has a heartbeat or is a live Java
    /// KCL 3.x worker.
    pub workers: Vec<WorkerRow>,
    /// What `kcl-host deploy` asked every worker to run, if it was used.
    pub deployed: Option<DeployedRow>,
    /// Rows that are not leases (left as they are).
    pub unreadable: Vec<String>,
}

/// The `deploy` row.
#[derive(Clone, Debug, Serialize)]
pub struct DeployedRow {
    /// The version to run.
    pub processor: String,
    /// Where it is stored.
    pub source: String,
    /// What `kcl-host deploy --rollback` returns to.
    pub previous: Option<String>,
}

/// Reads the lease, control and progress tables. A heartbeat older than `failover_time` counts as stopped.
pub async fn read(clients: &AwsClients, application: &str, failover_time: Duration) -> Result<Report, LeaseError> {
    let store = DynamoStore::new(clients.dynamodb.clone(), application);
    store.check_table().await?;
    let scan = store.scan().await?;
    let control = match HeartbeatTable::new(clients.dynamodb.clone(), application).read().await {
        Ok(read) => read,
        // A table only Java KCL (or an older kcl-host) has used.
        Err(LeaseError::Aws(crate::aws::AwsError::TableMissing(_))) => Default::default(),
        Err(e) => return Err(e),
    };
    let deployed = Deployed::in_read(&control);
    let progress_rows = progress::read(&progress::progress_table(clients.dynamodb.clone(), application)).await?;
    let progress = progress::reported(&progress_rows);
    let rollouts = progress::reported_rollouts(&progress_rows);
    let heartbeats = control.heartbeats;
    let running: HashMap<&str, Version> = heartbeats.iter().filter_map(|h| Some((h.worker.as_str(), Version::running(h)?))).collect();
    let now = clock::unix_ms();
    let ages: HashMap<&str, Option<u64>> =
        heartbeats.iter().map(|h| (h.worker.as_str(), h.beat_ms.map(|ms| now.saturating_sub(ms)))).collect();
    let retrying: HashMap<(&str, String), Retrying> =
        heartbeats.iter().flat_map(|h| Retrying::reported(h).into_iter().map(|(shard, r)| ((h.worker.as_str(), shard), r))).collect();
    let in_flight: HashMap<(&str, String), InFlight> =
        heartbeats.iter().flat_map(|h| InFlight::reported(h).into_iter().map(|(shard, f)| ((h.worker.as_str(), shard), f))).collect();
    let by_key = scan.leases.iter().map(|l| (l.key.as_str(), l)).collect();
    let mut leases_per_worker: BTreeMap<String, usize> = heartbeats.iter().map(|h| (h.worker.clone(), 0)).collect();
    leases_per_worker.extend(rules::live_kcl3_workers(&scan.kcl3_workers, now / 1000).into_iter().map(|w| (w, 0)));
    let mut shards: Vec<ShardRow> = scan
        .leases
        .iter()
        .map(|lease| {
            if let Some(owner) = &lease.owner {
                *leases_per_worker.entry(owner.clone()).or_default() += 1;
            }
            let state = if lease.is_finished() {
                State::ShardEnd
            } else if !is_ready(lease, &by_key) {
                State::WaitingForParents
            } else {
                match lease.owner.as_deref().map(|o| ages.get(o)) {
                    None => State::Unassigned,
                    Some(None) => State::Owned,
                    Some(Some(age)) if age.is_some_and(|a| a > failover_time.as_millis() as u64) => State::Expired,
                    Some(Some(_)) => State::Processing,
                }
            };
            let reported = lease.owner.as_deref().map(|owner| (owner, lease.key.to_string()));
            let retrying = reported.as_ref().and_then(|key| retrying.get(key)).cloned();
            let in_flight = reported.as_ref().and_then(|key| in_flight.get(key)).cloned();
            let progress = reported.as_ref().and_then(|(owner, key)| progress.get(&((*owner).to_owned(), key.clone()))).cloned();
            let state = if state == State::Processing && retrying.is_some() { State::Retrying } else { state };
            ShardRow {
                shard: lease.key.to_string(),
                stream: lease.key.stream().map(|stream| stream.name),
                state,
                owner: lease.owner.clone(),
                checkpoint: lease.checkpoint.as_column().to_owned(),
                sub_sequence_number: lease.checkpoint.sub_sequence_column(),
                counter: lease.counter,
                parents: lease.parents.iter().cloned().collect(),
                lag_ms: None,
                retrying,
                progress,
                in_flight,
                state_size: None,
            }
        })
        .collect();
    shards.sort_by(|a, b| a.shard.cmp(&b.shard));
    let workers = leases_per_worker
        .into_iter()
        .map(|(worker, leases)| WorkerRow {
            heartbeat_age_ms: ages.get(worker.as_str()).copied().flatten(),
            kcl3_report_age_ms: scan.kcl3_workers.get(&worker).map(|lut| now.saturating_sub(lut * 1000)),
            processor: running.get(worker.as_str()).map(|version| version.describe()),
            rollout: rollouts.get(&worker).filter(|r| **r != RolloutReport::default()).cloned(),
            worker,
            leases,
        })
        .collect();
    let deployed = deployed.map(|d| DeployedRow {
        processor: d.wanted.describe(),
        source: d.wanted.source,
        previous: d.previous.map(|p| p.describe()),
    });
    let unreadable = scan.unreadable.into_iter().collect();
    Ok(Report { application: application.to_owned(), shards, workers, deployed, unreadable })
}

/// Fills `lag_ms` for every shard being processed: one GetRecords from just
/// after its checkpoint says how far that is behind the tip. A key that
/// names no stream is of `stream` (`--stream`); without it, its lag is left out.
pub async fn add_lag(report: &mut Report, clients: &AwsClients, stream: Option<&str>) -> Result<(), crate::aws::AwsError> {
    for row in report.shards.iter_mut().filter(|r| r.state != State::ShardEnd) {
        let Some(stream) = row.stream.as_deref().or(stream) else { continue };
        let start = match Checkpoint::parse(&row.checkpoint, row.sub_sequence_number) {
            Some(Checkpoint::At(position)) => StartingPosition::After(position.sequence_number().to_owned()),
            _ => StartingPosition::TrimHorizon,
        };
        row.lag_ms = crate::source::millis_behind(clients, stream, LeaseKey::from(&row.shard).shard_id(), start).await?;
    }
    Ok(())
}

/// Fills `state_size` for every shard: one Scan of the state table (which
/// reads every item: a cost of the table's size), each item counted for the
/// shard whose checkpoint wrote it. The host's own items are not counted.
pub async fn add_state_sizes(report: &mut Report, clients: &AwsClients) -> Result<(), LeaseError> {
    let table = StateTable::new(clients.dynamodb.clone(), &report.application);
    let mut sizes: HashMap<(String, String), StateSize> = HashMap::new();
    match table.check().await {
        Ok(()) => {
            for item in table.scan(None).await?.into_iter().filter(|item| !item.key.starts_with(HOST_KEY_PREFIX)) {
                let size = sizes.entry((item.stream, item.shard)).or_default();
                size.keys += 1;
                size.bytes += (item.key.len() + item.value.len()) as u64;
            }
            for owner in table.log_items().await? {
                sizes.entry(owner).or_default().log_items += 1;
            }
        }
        Err(LeaseError::Aws(crate::aws::AwsError::TableMissing(_))) => {}
        Err(e) => return Err(e),
    }
    for row in &mut report.shards {
        let shard = LeaseKey::from(&row.shard).shard_id().to_owned();
        let size = sizes.iter().find(|((stream, owner), _)| *owner == shard && row.stream.as_ref().is_none_or(|s| s == stream));
        row.state_size = Some(size.map(|(_, size)| size.clone()).unwrap_or_default());
    }
    Ok(())
}

/// `--failover-time` of the commands that read the tables: the workers'
/// failover time, past which a heartbeat counts as stopped.
pub fn failover_time(flag: Option<&str>) -> Result<Duration, String> {
    duration("failover_time", flag, crate::lease::rules::TakeSettings::default().failover_time).map_err(|e| e.to_string())
}

/// `kcl-host status`: prints the report once, or (`--watch`) again and again.
pub async fn command(args: StatusArgs) -> Result<(), String> {
    let clients = AwsClients::from_env(&args.aws.settings()).await.map_err(|e| e.to_string())?;
    let failover = failover_time(args.failover_time.as_deref())?;
    let every = match &args.watch {
        Some(text) => Some(duration("watch", Some(text), Default::default()).map_err(|e| e.to_string())?),
        None => None,
    };
    loop {
        let mut report = read(&clients, &args.application, failover).await.map_err(|e| e.to_string())?;
        if args.lag {
            add_lag(&mut report, &clients, args.stream.as_deref()).await.map_err(|e| e.to_string())?;
        }
        if args.state {
            add_state_sizes(&mut report, &clients).await.map_err(|e| e.to_string())?;
        }
        let text = if args.json {
            serde_json::to_string_pretty(&report).expect("the report serializes")
        } else {
            render(&report)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixty_four_shards_fit_a_hundred_columns() {
        let shards = (0..64)
            .map(|i| ShardRow {
                shard: format!("shardId-{i:012}"),
                stream: None,
                state: if i < 2 { State::Processing } else { State::WaitingForParents },
                owner: Some("ip-10-0-0-1.eu-west-1.compute.internal-12345-abcd".into()),
                checkpoint: "49590338271490256608559692538361571095921575989136588898".into(),
                sub_sequence_number: 12,
                counter: 123_456_789,
                parents: vec![],
                lag_ms: Some(1_234_567),
                progress: (i == 0).then(|| Progress { source: Some("dynamodb-streams".into()), ..Default::default() }),
                retrying: (i == 7).then(|| Retrying { since_ms: clock::unix_ms() - 5_500, attempts: 40, last_error: "processor trapped: ".repeat(20), limit: None }),
                in_flight: (i < 2).then(|| InFlight { instances: 8, calls: 8 - i as usize, lag_records: 120 }),
                state_size: Some(StateSize { keys: i * 1_000, bytes: i * 1_500_000, log_items: if i == 3 { 2 } else { 0 } }),
            })
            .collect();
        let workers = vec![
            WorkerRow { worker: "w".repeat(80), leases: 64, heartbeat_age_ms: Some(1500), kcl3_report_age_ms: None, processor: Some("9f2c1ab3d4e5".into()), rollout: None },
            WorkerRow { worker: "java-3".into(), leases: 0, heartbeat_age_ms: None, kcl3_report_age_ms: Some(12_400), processor: None, rollout: None },
            WorkerRow {
                worker: "kcl-2".into(),
                leases: 0,
                heartbeat_age_ms: Some(500),
                kcl3_report_age_ms: None,
                processor: Some("1a2b3c4d5e6f".into()),
                rollout: Some(RolloutReport { trial: Some("9f2c1ab3d4e5".into()), canary: Some("shardId-000000000004".into()), probation_until_ms: None, rolled_back: vec!["0badc0ffee00".into()] }),
            },
        ];
        let deployed = Some(DeployedRow { processor: "9f2c1ab3d4e5".into(), source: format!("/{}", "d/".repeat(60)), previous: Some("1a2b3c4d5e6f".into()) });
        let text = render(&Report { application: "orders".into(), shards, workers, deployed, unreadable: vec![] });
        assert!(text.contains("9f2c1ab3d4e5\n"), "{text}");
        assert!(text.starts_with("orders — 64 shards, 3 workers\nsource: dynamodb-streams\n"), "the source the workers report: {text}");
        assert!(text.contains("kcl-2 rollout: 9f2c1ab3d4e5 on its canary shardId-000000000004; rolled back: 0badc0ffee00\n"), "{text}");
        assert!(text.contains("java-3                                        0  3.x report 12s ago"), "a Java KCL 3.x worker holding nothing yet: {text}");
        let detail = |l: &&str| l.contains(" retrying ") || l.contains(" instances: ") || l.contains(" state: ");
        assert_eq!(text.lines().filter(|l| l.starts_with("shardId-") && !detail(l)).count(), 64);
        assert!(text.contains("shardId-000000000001 8 instances: 7 calls in flight, slowest 120 records behind the fastest"), "{text}");
        assert!(text.contains("shardId-000000000003 state: 3000 keys, 4.3 MiB, 2 state log items"), "{text}");
        assert!(text.contains("shardId-000000000007 retrying 5s, 40 failures (no limit: blocked): processor trapped"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
        }
    }
}
