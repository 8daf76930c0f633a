//! The components `kcl-host deploy` stored for the fleet, in
//! `<application>-KclHostComponents`, so every worker on any machine loads
//! the deployed version from DynamoDB instead of from a path it may not have.
//! They are kept apart from the control table, which every worker scans
//! twice a second: a scan pays for every byte of every row.
//!
//! A component takes rows of at most [`CHUNK`] bytes (DynamoDB items are at
//! most 400 KB): `<hash>/<i>` with its bytes as `data` (B), then the row
//! `<hash>` with their count as `chunks` (N), written last so a reader never
//! sees a half-stored component. The hash is checked again on loading.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::lease::table::KeyedTable;
use crate::lease::LeaseError;

/// Most component bytes in one row.
pub const CHUNK: usize = 350_000;

/// Where a deployed version is loaded from when it is stored here: the
/// `source` of the `deploy` row, `dynamodb://<table>/<hash>`.
pub const SCHEME: &str = "dynamodb://";

/// The name of `application`'s component table.
pub fn components_table_name(application: &str) -> String {
    format!("{application}-KclHostComponents")
}

/// The component table of one application.
#[derive(Clone, Debug)]
pub struct ComponentStore {
    table: KeyedTable,
}

impl ComponentStore {
    /// The component table of `application`.
    pub fn new(client: Client, application: &str) -> Self {
        let name = components_table_name(application);
        Self { table: KeyedTable { client, name, key: "key", what: "kcl-host component table" } }
    }

    /// Creates the table if it is missing.
    pub async fn ensure(&self) -> Result<(), LeaseError> {
        self.table.ensure().await
    }

    /// The `source` naming the component `hash` in this table.
    pub fn source(&self, hash: &str) -> String {
        format!("{SCHEME}{}/{hash}", self.table.name)
    }

    /// The hash a `source` names, when it names this table.
    pub fn hash_in<'a>(&self, source: &'a str) -> Option<&'a str> {
        source.strip_prefix(SCHEME)?.strip_prefix(self.table.name.as_str())?.strip_prefix('/')
    }

    /// Stores `bytes` as the component `hash`.
    pub async fn put(&self, hash: &str, bytes: &[u8]) -> Result<(), LeaseError> {
        let chunks = bytes.chunks(CHUNK);
        let count = chunks.len();
        for (i, chunk) in chunks.enumerate() {
            self.table
                .client
                .put_item()
                .table_name(&self.table.name)
                .item("key", AttributeValue::S(format!("{hash}/{i}")))
                .item("data", AttributeValue::B(Blob::new(chunk)))
                .send()
                .await
                .map_err(|e| self.table.error("PutItem (component)", e))?;
        }
        self.table
            .client
            .put_item()
            .table_name(&self.table.name)
            .item("key", AttributeValue::S(hash.to_owned()))
            .item("chunks", AttributeValue::N(count.to_string()))
            .send()
            .await
            .map_err(|e| self.table.error("PutItem (component)", e))?;
        Ok(())
    }

    /// The bytes of the component `hash`; `None` when it is not (or not
    /// completely) stored.
    pub async fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, LeaseError> {
        let Some(head) = self.item(hash.to_owned()).await? else { return Ok(None) };
        let Some(AttributeValue::N(count)) = head.get("chunks") else { return Ok(None) };
        let count: usize = count.parse().unwrap_or(0);
        let mut bytes = Vec::with_capacity(count * CHUNK);
        for i in 0..count {
            match self.item(format!("{hash}/{i}")).await?.as_ref().and_then(|row| row.get("data")) {
                Some(AttributeValue::B(data)) => bytes.extend_from_slice(data.as_ref()),
                _ => return Ok(None),
            }
        }
        Ok(Some(bytes))
    }

    /// Deletes the component `hash` (the head row first, so it reads as gone at once).
    pub async fn remove(&self, hash: &str) -> Result<(), LeaseError> {
        let Some(head) = self.item(hash.to_owned()).await? else { return Ok(()) };
        let count = match head.get("chunks") {
            Some(AttributeValue::N(n)) => n.parse().unwrap_or(0),
            _ => 0,
        };
        for key in std::iter::once(hash.to_owned()).chain((0..count).map(|i| format!("{hash}/{i}"))) {
            self.table
                .client
                .delete_item()
                .table_name(&self.table.name)
                .key("key", AttributeValue::S(key))
                .send()
                .await
                .map_err(|e| self.table.error("DeleteItem (component)", e))?;
        }
        Ok(())
    }

    async fn item(&self, key: String) -> Result<Option<std::collections::HashMap<String, AttributeValue>>, LeaseError> {
        let got = self
            .table
            .client
            .get_item()
            .table_name(&self.table.name)
            .key("key", AttributeValue::S(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.table.error("GetItem (component)", e))?;
        Ok(got.item)
    }
}
