//! Processor versions in the control table: the `deploy` row (written by
//! `kcl-host deploy`), and the version each worker's heartbeat row reports
//! it runs ([`crate::lease::heartbeat`] writes and reads those rows; the
//! attributes are this module's).
//!
//! The `deploy` row names the processor every worker should run: `hash`
//! (the start of its SHA-256) and `source` (where it is stored,
//! `dynamodb://<application>-KclHostComponents/<hash>` (see
//! [`super::store`]), or a path), with `component` (its `name@version`),
//! and the version before it as `previousHash` / `previousSource` /
//! `previousComponent` for `--rollback`. A heartbeat row reports the
//! running version as `processorHash`, `processorSource` and
//! `processorComponent`.

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::aws::AwsError;
use crate::lease::heartbeat::{control_table, ControlRead, Heartbeat, Report};
use crate::lease::table::Item;
use crate::lease::table::KeyedTable;
use crate::lease::LeaseError;

/// The key of the deployed-version row.
const DEPLOY: &str = "deploy";
/// The `deploy` row's attributes for the wanted version and the one before it.
const WANTED: [&str; 3] = ["hash", "source", "component"];
const PREVIOUS: [&str; 3] = ["previousHash", "previousSource", "previousComponent"];

/// A processor version, as the `deploy` row names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// The start of the component's SHA-256 (`Processor::hash`).
    pub hash: String,
    /// Where every worker loads it from.
    pub source: String,
    /// `name@version` from the component's metadata (`Processor::component`).
    pub component: Option<String>,
}

impl Version {
    /// The hash, with `(name@version)` when there is one.
    pub fn describe(&self) -> String {
        match &self.component {
            Some(component) => format!("{} ({component})", self.hash),
            None => self.hash.clone(),
        }
    }

    /// The version `heartbeat` reports its worker runs.
    pub fn running(heartbeat: &Heartbeat) -> Option<Version> {
        let (hash, source) = (heartbeat.text("processorHash")?, heartbeat.text("processorSource")?);
        Some(Version { hash: hash.to_owned(), source: source.to_owned(), component: heartbeat.text("processorComponent").map(str::to_owned) })
    }

    /// What a heartbeat row reports of the version its worker runs.
    pub fn report(&self) -> Report {
        let text = |value: &str| Some(AttributeValue::S(value.to_owned()));
        vec![
            ("processorHash", text(&self.hash)),
            ("processorSource", text(&self.source)),
            ("processorComponent", self.component.as_deref().and_then(text)),
        ]
    }
}

/// The `deploy` row: the version wanted, and the one before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployed {
    /// The version every worker should run.
    pub wanted: Version,
    /// The one before it, for `--rollback`.
    pub previous: Option<Version>,
}

impl Deployed {
    /// The `deploy` row among a control table read's rows, if there is one.
    pub fn in_read(read: &ControlRead) -> Option<Deployed> {
        let row = read.others.iter().find(|item| matches!(item.get("key"), Some(AttributeValue::S(key)) if key == DEPLOY))?;
        Self::from_row(row)
    }

    /// What the `deploy` row `row` names.
    fn from_row(row: &Item) -> Option<Deployed> {
        let text = |name: &str| match row.get(name) {
            Some(AttributeValue::S(value)) => Some(value.clone()),
            _ => None,
        };
        let version = |[hash, source, component]: [&str; 3]| Some(Version { hash: text(hash)?, source: text(source)?, component: text(component) });
        Some(Deployed { wanted: version(WANTED)?, previous: version(PREVIOUS) })
    }
}

/// The `deploy` row of one application's control table.
#[derive(Clone, Debug)]
pub struct DeployRow {
    table: KeyedTable,
}

impl DeployRow {
    /// The `deploy` row of `application`.
    pub fn new(client: Client, application: &str) -> Self {
        Self { table: control_table(client, application) }
    }

    /// The row as it is now; `None` when there is none (or no control
    /// table: a new application).
    pub async fn read(&self) -> Result<Option<Deployed>, LeaseError> {
        let get = self.table.client.get_item().table_name(&self.table.name).key("key", AttributeValue::S(DEPLOY.into())).consistent_read(true);
        match get.send().await.map_err(|e| self.table.error("GetItem (deploy)", e)) {
            Ok(got) => Ok(got.item.as_ref().and_then(Deployed::from_row)),
            Err(LeaseError::Aws(AwsError::TableMissing(_))) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Records `version` as the one every worker should run, the one wanted
    /// until now becoming the previous one.
    pub async fn write(&self, version: &Version, previous: Option<&Version>) -> Result<(), LeaseError> {
        let mut item = Item::from([("key".to_owned(), AttributeValue::S(DEPLOY.into()))]);
        let mut add = |version: &Version, [hash, source, component]: [&str; 3]| {
            item.insert(hash.to_owned(), AttributeValue::S(version.hash.clone()));
            item.insert(source.to_owned(), AttributeValue::S(version.source.clone()));
            if let Some(name) = &version.component {
                item.insert(component.to_owned(), AttributeValue::S(name.clone()));
            }
        };
        add(version, WANTED);
        if let Some(previous) = previous {
            add(previous, PREVIOUS);
        }
        let put = self.table.client.put_item().table_name(&self.table.name).set_item(Some(item));
        put.send().await.map_err(|e| self.table.error("PutItem (deploy)", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_reported_in_a_heartbeat_row_reads_back() {
        let version = Version { hash: "abc".into(), source: "/p.wasm".into(), component: Some("orders@1.3.0".into()) };
        let mut heartbeat = Heartbeat::bare("w", 1);
        for (name, value) in version.report() {
            heartbeat.row.extend(value.map(|v| (name.to_owned(), v)));
        }
        assert_eq!(Version::running(&heartbeat), Some(version));
        assert_eq!(Version::running(&Heartbeat::bare("w", 1)), None);
    }
}
