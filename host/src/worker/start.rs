//! A worker's start: its tables, the deployed version, its first
//! heartbeat, its shard loops' template, its upkeep tasks and its first
//! lease pass.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::in_flight::InFlight;
use super::redelivery::Budget;
use super::shards::{Balance, ShardLoops, Template};
use super::upkeep::{check_unique, process_name, renew_every, sync_shards, Beat};
use super::{Summary, Worker, WorkerError};
use crate::admin::{self, Health};
use crate::aws::AwsClients;
use crate::config::WorkerConfig;
use crate::failure::retrying::Retrying;
use crate::failure::DeadLetters;
use crate::fetch::FetchSettings;
use crate::lease::coordinator::Coordinator;
use crate::lease::dynamo::DynamoStore;
use crate::lease::heartbeat::{streams_report, HeartbeatTable, LeaseNews};
use crate::lease::watch::{self, FleetWatch};
use crate::lease::LeaseStore;
use crate::metrics::publish::Publisher;
use crate::dashboard::Dashboard;
use crate::metrics::{progress, Metrics};
use crate::output::Outputs;
use crate::state::StateTable;
use crate::source::Sources;
use crate::stream::Streams;
use crate::swap::deploy::Deployed;
use crate::swap::fleet::Follower;
use crate::swap::rollout::Rollout;
use crate::swap::store::ComponentStore;
use crate::swap::Swapper;

impl Worker {
    /// Reads the control table (the deployed version, and whether another
    /// live process uses this worker id), writes the first heartbeat,
    /// syncs shards to leases and takes every lease it should at once.
    pub(super) async fn start(config: WorkerConfig, clients: AwsClients, swapper: Arc<Swapper>) -> Result<Self, WorkerError> {
        let started = Instant::now();
        // Check the streams before touching DynamoDB: a typo in --stream must not create a table.
        let streams = Streams::describe(&clients, &config.streams, config.streams_listed).await?;
        streams.check_images(config.needs_images).map_err(WorkerError::Refused)?;
        let failover = config.take.failover_time;
        let store = Arc::new(DynamoStore::new(clients.dynamodb.clone(), &config.application).with_renewal_timeout(failover));
        let control = HeartbeatTable::new(clients.dynamodb.clone(), &config.application);
        tokio::try_join!(store.ensure_table(), control.ensure())?;
        // The table says how its keys name shards (and whether it can hold these streams).
        let leases = store.list().await?;
        let streams = Arc::new(streams.fit_table(&config.application, &leases).map_err(WorkerError::Refused)?);
        let me = config.worker_id.clone();
        let mut coordinator = Coordinator::new(store.clone(), &me, config.take.clone()).with_scope(streams.scope());
        let read_sent = Instant::now();
        let read = control.read().await?;
        // Before any shard starts: a restarted or new worker runs what the fleet was told to.
        let follower = Follower::new(swapper.clone(), ComponentStore::new(clients.dynamodb.clone(), &config.application));
        follower.start(Deployed::in_read(&read).as_ref()).await;
        let process = process_name();
        check_unique(&control, &me, &read, failover).await?;
        // Others see this worker (and may give it leases) from its first beat on.
        let retrying = Arc::new(Retrying::board());
        let in_flight = Arc::new(InFlight::board());
        let news = Arc::new(LeaseNews::default());
        let heartbeat = Beat {
            control: control.clone(),
            me: me.clone(),
            process: process.clone(),
            swapper: swapper.clone(),
            cover: coordinator.cover(),
            retrying: retrying.clone(),
            in_flight: in_flight.clone(),
            news: news.clone(),
            streams: if streams.is_multi() { streams_report(&streams.iter().map(|s| s.identifier.to_string()).collect::<Vec<_>>()) } else { Vec::new() },
        };
        heartbeat.once(true).await?;
        let mut fleet = FleetWatch::new(&me, failover).with_fleet_reads(config.fleet_heartbeat_reads);
        coordinator.follow_fleet(&mut fleet, &read.heartbeats, read_sent, Instant::now());

        let fetch = FetchSettings { max_records: config.fetch_limit(), ..config.fetch.clone() };
        let sources = Arc::new(Sources::connect(streams.clone(), &clients, fetch, config.retrieval, &config.application).await?);
        let metrics = Arc::new(Metrics::new(&config.application, &me));
        for stream in streams.iter() {
            metrics.stream_source(&stream.name, stream.source.label());
        }
        let health = Arc::new(Health::new(coordinator.liveness(), failover));
        let outputs = Outputs::connect(&config.outputs, &clients, config.output_buffer_bytes, Some(metrics.clone())).await.map_err(WorkerError::Refused)?;
        let dead_letters = DeadLetters::connect(&config.failure, &clients, Some(metrics.clone())).await.map_err(WorkerError::Refused)?;
        if let Some(warning) = config.failure.drop_warning() {
            tracing::warn!("{warning}");
        }
        let dashboard = Arc::new(Dashboard::new(clients.clone(), &config.application, failover, false));
        let admin = admin::start(config.admin_listen, metrics.clone(), health.clone(), swapper.clone(), Some(dashboard)).await.map_err(WorkerError::Refused)?;
        let mut publishing = config.metrics.clone();
        if streams.is_multi() {
            publishing.selection.stream_ids = streams.iter().map(|s| (s.name.clone(), s.identifier.to_string())).collect();
        }
        let publisher = Publisher::start(metrics.clone(), &publishing, &config.application, &clients.cloudwatch).map_err(WorkerError::Refused)?;
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let (reports_tx, reports) = mpsc::unbounded_channel();
        let mut processor = swapper.subscribe();
        let rollout = Rollout::new(processor.borrow_and_update().clone(), config.swap, metrics.clone());
        let template = Template {
            reader: sources.clone(),
            streams: streams.clone(),
            redelivery: Budget::new(config.swap.buffer_bytes),
            metrics: metrics.clone(),
            outputs,
            state: Arc::new(StateTable::new(clients.dynamodb.clone(), &config.application)),
            failure: Arc::new(config.failure.clone()),
            dead_letters,
            retrying: retrying.clone(),
            parallelism: config.parallelism,
            in_flight,
            call_records: config.fetch.max_records as usize,
            window: config.window,
            memory_limit: config.runtime.memory_limit,
        };
        let shards = ShardLoops::new(template, rollout, ended_tx, reports_tx);

        // The heartbeat and the renewals in tasks of their own: no take pass,
        // shard sync or slow renewal delays them.
        let (taken_over_tx, taken_over) = mpsc::channel(1);
        let beats = heartbeat.every(failover / 3, watch::poll_interval(failover));
        let heartbeats = tokio::spawn(
            async move {
                let _ = taken_over_tx.send(beats.await).await;
            }
            .in_current_span(),
        );
        let renewals = tokio::spawn(renew_every(coordinator.renewer(failover / 3), metrics.clone()).in_current_span());
        let progress_table = progress::progress_table(clients.dynamodb.clone(), &config.application);
        let progress = tokio::spawn(progress::write_every(progress_table.clone(), me.clone(), metrics.progress()).in_current_span());

        let mut worker = Worker {
            config,
            clients,
            streams,
            started,
            me,
            process,
            store,
            control,
            progress_table,
            coordinator,
            fleet,
            news,
            swapper,
            follower,
            shards,
            metrics,
            health,
            summary: Summary::default(),
            balance: Balance::default(),
            ended,
            reports,
            processor,
            upkeep: [heartbeats, renewals, progress],
            admin,
            publisher,
            taken_over,
        };
        if sync_shards(&worker.streams, &worker.clients, &worker.store, &leases).await? {
            worker.news.freed();
        }
        worker.balance = worker.shards.apply(worker.coordinator.take_pass().await?);
        tracing::info!(leases = worker.shards.len(), "first lease pass done in {:?}", started.elapsed());
        Ok(worker)
    }
}
