//! The state table: made on first use, read with strongly consistent
//! batch reads.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use aws_sdk_dynamodb::Client;
use tokio::sync::OnceCell;

use super::commit::{item_key, text};
use crate::aws::patient;
use crate::lease::table::KeyedTable;
use crate::lease::LeaseError;
use crate::metrics::ShardMetrics;
use crate::runtime::{StateFuture, StateSource};

/// Most keys one `BatchGetItem` reads.
const BATCH_GET_KEYS: usize = 100;

/// The name of `application`'s state table.
pub fn state_table_name(application: &str) -> String {
    format!("{application}-KclHostState")
}

/// An application's state table.
#[derive(Debug)]
pub struct StateTable {
    table: KeyedTable,
    /// Set once the table is known to exist.
    ready: OnceCell<()>,
}

impl StateTable {
    /// The state table of `application`; nothing is created until it is used.
    pub fn new(client: Client, application: &str) -> Self {
        let table = KeyedTable { client, name: state_table_name(application), key: "stateKey", what: "kcl-host state table" };
        Self { table, ready: OnceCell::new() }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.table.name
    }

    /// Creates the table if it is missing (once per worker).
    pub async fn ensure(&self) -> Result<(), LeaseError> {
        self.ready.get_or_try_init(|| self.table.ensure()).await.map(|_| ())
    }

    /// Refuses a table that is missing or not a state table, creating
    /// nothing: what an operator's read checks first.
    pub async fn check(&self) -> Result<(), LeaseError> {
        self.table.check().await
    }

    /// The committed values of `stream`'s `keys`, in order; the table is
    /// made first if it is missing.
    pub async fn read(&self, stream: &str, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, LeaseError> {
        self.ensure().await?;
        self.read_existing(stream, keys).await
    }

    /// [`Self::read`] on a table known to exist.
    pub async fn read_existing(&self, stream: &str, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, LeaseError> {
        let mut found: HashMap<String, Vec<u8>> = HashMap::new();
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut wanted: Vec<_> = chunk.iter().map(|key| HashMap::from([("stateKey".to_owned(), item_key(stream, key))])).collect();
            // Unprocessed keys (throttling) are asked for again until none are left.
            while !wanted.is_empty() {
                let request = KeysAndAttributes::builder().set_keys(Some(wanted)).consistent_read(true).build().expect("keys are set");
                let output = self
                    .table
                    .client
                    .batch_get_item()
                    .request_items(&self.table.name, request)
                    .customize()
                    .config_override(patient())
                    .send()
                    .await
                    .map_err(|e| self.table.error("BatchGetItem", e))?;
                for item in output.responses.and_then(|mut r| r.remove(&self.table.name)).unwrap_or_default() {
                    if let (Some(AttributeValue::S(key)), Some(AttributeValue::B(value))) = (item.get("key"), item.get("value")) {
                        found.insert(key.clone(), value.clone().into_inner());
                    }
                }
                wanted = output.unprocessed_keys.and_then(|mut u| u.remove(&self.table.name)).map(|k| k.keys).unwrap_or_default();
            }
        }
        Ok(keys.iter().map(|key| found.get(key).cloned()).collect())
    }
}

/// One item of the state table.
#[derive(Debug, serde::Serialize)]
pub struct StateItem {
    /// The stream.
    pub stream: String,
    /// The processor's key.
    pub key: String,
    /// The value.
    pub value: Vec<u8>,
    /// The shard whose checkpoint wrote it.
    pub shard: String,
    /// That checkpoint.
    pub checkpoint: String,
}

impl StateTable {
    /// Every item (of `stream`, when given), read consistently page by page.
    pub async fn scan(&self, stream: Option<&str>) -> Result<Vec<StateItem>, LeaseError> {
        let mut items = Vec::new();
        let mut pages = self.table.client.scan().table_name(&self.table.name).consistent_read(true).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.table.error("Scan", e))?;
            for item in page.items() {
                let Some(AttributeValue::B(value)) = item.get("value") else { continue };
                let state = StateItem { stream: text(item, "stream"), key: text(item, "key"), value: value.clone().into_inner(), shard: text(item, "shard"), checkpoint: text(item, "checkpoint") };
                if stream.is_none_or(|s| s == state.stream) {
                    items.push(state);
                }
            }
        }
        items.sort_by(|a, b| (&a.stream, &a.key).cmp(&(&b.stream, &b.key)));
        Ok(items)
    }

    /// The (stream, shard) of every state log item (see `lease::state_log`).
    pub async fn log_items(&self) -> Result<Vec<(String, String)>, LeaseError> {
        let mut owners = Vec::new();
        let scan = self.table.client.scan().table_name(&self.table.name).consistent_read(true).filter_expression("attribute_exists(#log)");
        let mut pages = scan.expression_attribute_names("#log", "log").projection_expression("#stream, #shard").expression_attribute_names("#stream", "stream").expression_attribute_names("#shard", "shard").into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.table.error("Scan", e))?;
            owners.extend(page.items().iter().map(|item| (text(item, "stream"), text(item, "shard"))));
        }
        Ok(owners)
    }
}

/// One stream's committed state, as a shard's instance reads it.
pub struct ShardStateSource {
    /// The state table.
    pub table: Arc<StateTable>,
    /// The shard's stream.
    pub stream: String,
    /// The shard's metrics: keys read and keys served from memory.
    pub metrics: ShardMetrics,
}

impl StateSource for ShardStateSource {
    fn read<'a>(&'a self, keys: &'a [String]) -> StateFuture<'a, Result<Vec<Option<Vec<u8>>>, String>> {
        self.metrics.state_read(keys.len(), 0);
        Box::pin(async move { self.table.read(&self.stream, keys).await.map_err(|e| e.to_string()) })
    }

    fn served_from_memory(&self, keys: usize) {
        self.metrics.state_read(0, keys);
    }
}
