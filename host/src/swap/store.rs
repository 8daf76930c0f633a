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

use futures_util::{StreamExt, TryStreamExt};

use crate::lease::table::{Item, KeyedTable};
use crate::lease::LeaseError;

/// Most component bytes in one row.
pub const CHUNK: usize = 350_000;

/// Rows read at once when loading: a large artifact is tens of rows.
const PARALLEL_READS: usize = 8;

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
        self.put_rows(hash, bytes, Item::new()).await
    }

    /// The bytes of the component `hash`; `None` when it is not (or not
    /// completely) stored.
    pub async fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, LeaseError> {
        Ok(self.get_rows(hash).await?.map(|(_, bytes)| bytes))
    }

    /// Stores `artifact`, the component `hash` compiled by the engine
    /// `engine`, with `head` (what vouches for it) on its head row, and
    /// lists it on the component's row so [`Self::remove`] finds it.
    pub async fn put_artifact(&self, hash: &str, engine: &str, artifact: &[u8], head: Item) -> Result<(), LeaseError> {
        self.put_rows(&artifact_key(hash, engine), artifact, head).await?;
        let listed = self.table.client.update_item().table_name(&self.table.name).key("key", AttributeValue::S(hash.to_owned()));
        let listed = listed.update_expression("ADD artifacts :engine").expression_attribute_values(":engine", AttributeValue::Ss(vec![engine.to_owned()]));
        listed.send().await.map_err(|e| self.table.error("UpdateItem (component)", e))?;
        Ok(())
    }

    /// The component `hash` as compiled by the engine `engine`, with its
    /// head row; `None` when there is none.
    pub async fn get_artifact(&self, hash: &str, engine: &str) -> Result<Option<(Item, Vec<u8>)>, LeaseError> {
        self.get_rows(&artifact_key(hash, engine)).await
    }

    /// Deletes the component `hash` and its compiled artifacts.
    pub async fn remove(&self, hash: &str) -> Result<(), LeaseError> {
        let Some(head) = self.remove_rows(hash.to_owned()).await? else { return Ok(()) };
        if let Some(AttributeValue::Ss(engines)) = head.get("artifacts") {
            for engine in engines {
                self.remove_rows(artifact_key(hash, engine)).await?;
            }
        }
        Ok(())
    }

    /// Writes `bytes` in rows `<key>/<i>`, then the head row `key` with
    /// their count and `head`'s attributes (set, so the others it has stay).
    async fn put_rows(&self, key: &str, bytes: &[u8], mut head: Item) -> Result<(), LeaseError> {
        let chunks = bytes.chunks(CHUNK);
        head.insert("chunks".to_owned(), AttributeValue::N(chunks.len().to_string()));
        for (i, chunk) in chunks.enumerate() {
            let put = self.table.client.put_item().table_name(&self.table.name);
            let put = put.item("key", AttributeValue::S(format!("{key}/{i}"))).item("data", AttributeValue::B(Blob::new(chunk)));
            put.send().await.map_err(|e| self.table.error("PutItem (component)", e))?;
        }
        let mut update = self.table.client.update_item().table_name(&self.table.name).key("key", AttributeValue::S(key.to_owned()));
        let mut sets = Vec::new();
        for (i, (name, value)) in head.into_iter().enumerate() {
            sets.push(format!("#a{i} = :v{i}"));
            update = update.expression_attribute_names(format!("#a{i}"), name).expression_attribute_values(format!(":v{i}"), value);
        }
        let update = update.update_expression(format!("SET {}", sets.join(", ")));
        update.send().await.map_err(|e| self.table.error("UpdateItem (component)", e))?;
        Ok(())
    }

    /// The head row `key` and the bytes of its rows, read a few at a time;
    /// `None` when it is not (or not completely) stored.
    async fn get_rows(&self, key: &str) -> Result<Option<(Item, Vec<u8>)>, LeaseError> {
        let Some(head) = self.item(key.to_owned()).await? else { return Ok(None) };
        let Some(AttributeValue::N(count)) = head.get("chunks") else { return Ok(None) };
        let count: usize = count.parse().unwrap_or(0);
        let rows = futures_util::stream::iter((0..count).map(|i| self.item(format!("{key}/{i}"))));
        let rows: Vec<Option<Item>> = rows.buffered(PARALLEL_READS).try_collect().await?;
        let mut bytes = Vec::with_capacity(count * CHUNK);
        for row in rows {
            match row.as_ref().and_then(|row| row.get("data")) {
                Some(AttributeValue::B(data)) => bytes.extend_from_slice(data.as_ref()),
                _ => return Ok(None),
            }
        }
        Ok(Some((head, bytes)))
    }

    /// Deletes the head row `key` first (so it reads as gone at once), then
    /// its rows; returns the head row, if there was one.
    async fn remove_rows(&self, key: String) -> Result<Option<Item>, LeaseError> {
        let Some(head) = self.item(key.clone()).await? else { return Ok(None) };
        let count = match head.get("chunks") {
            Some(AttributeValue::N(n)) => n.parse().unwrap_or(0),
            _ => 0,
        };
        for row in std::iter::once(key.clone()).chain((0..count).map(|i| format!("{key}/{i}"))) {
            let delete = self.table.client.delete_item().table_name(&self.table.name).key("key", AttributeValue::S(row));
            delete.send().await.map_err(|e| self.table.error("DeleteItem (component)", e))?;
        }
        Ok(Some(head))
    }

    async fn item(&self, key: String) -> Result<Option<Item>, LeaseError> {
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

/// The head row's key of the component `hash` compiled by `engine`.
fn artifact_key(hash: &str, engine: &str) -> String {
    format!("{hash}@{engine}")
}
