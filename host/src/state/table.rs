//! The state table: made on first use, read with strongly consistent
//! batch reads.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use aws_sdk_dynamodb::Client;
use tokio::sync::OnceCell;

use crate::lease::state_commit::item_key;
use crate::lease::table::KeyedTable;
use crate::lease::LeaseError;
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

    /// The committed values of `stream`'s `keys`, in order.
    pub async fn read(&self, stream: &str, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, LeaseError> {
        self.ensure().await?;
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

/// One stream's committed state, as a shard's instance reads it.
pub struct ShardStateSource {
    /// The state table.
    pub table: Arc<StateTable>,
    /// The shard's stream.
    pub stream: String,
}

impl StateSource for ShardStateSource {
    fn read<'a>(&'a self, keys: &'a [String]) -> StateFuture<'a, Result<Vec<Option<Vec<u8>>>, String>> {
        Box::pin(async move { self.table.read(&self.stream, keys).await.map_err(|e| e.to_string()) })
    }
}
