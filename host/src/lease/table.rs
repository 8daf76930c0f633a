//! Making sure a DynamoDB table keyed by one string attribute exists: the
//! lease table and the control table are both made this way.

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
};
use aws_sdk_dynamodb::Client;

use super::LeaseError;
use crate::aws::{AwsError, Service};

/// A DynamoDB item: attribute name → value.
pub type Item = std::collections::HashMap<String, AttributeValue>;

/// Longest wait for a new table to become active.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// A table with a string hash key named `key`.
#[derive(Clone, Debug)]
pub struct KeyedTable {
    /// The DynamoDB client.
    pub client: Client,
    /// The table's name.
    pub name: String,
    /// The hash key attribute.
    pub key: &'static str,
    /// What the table is, for messages ("lease table").
    pub what: &'static str,
}

impl KeyedTable {
    /// `error` from `operation` on this table, typed.
    pub fn error<E, R>(&self, operation: &'static str, error: SdkError<E, R>) -> LeaseError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        AwsError::from_sdk(Service::DynamoDb, operation, &self.name, error).into()
    }

    /// Creates the table (on demand) if it is missing and waits until it is
    /// active; refuses a table keyed otherwise. Describes first, so a worker
    /// whose role may not create tables works on one that exists.
    pub async fn ensure(&self) -> Result<(), LeaseError> {
        match self.client.describe_table().table_name(&self.name).send().await {
            Ok(described) => {
                let table = described.table;
                self.check_key_schema(table.as_ref().map_or(&[], |t| t.key_schema()))?;
                if table.and_then(|t| t.table_status) == Some(TableStatus::Active) {
                    return Ok(());
                }
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => self.create().await?,
            Err(e) => return Err(self.error("DescribeTable", e)),
        }
        self.wait_active().await
    }

    /// Refuses a table that is missing or keyed otherwise, creating nothing:
    /// what a command that only reads checks first.
    pub async fn check(&self) -> Result<(), LeaseError> {
        let described = self.client.describe_table().table_name(&self.name).send().await.map_err(|e| self.error("DescribeTable", e))?;
        self.check_key_schema(described.table.as_ref().map_or(&[], |t| t.key_schema()))
    }

    async fn create(&self) -> Result<(), LeaseError> {
        let created = self
            .client
            .create_table()
            .table_name(&self.name)
            .key_schema(KeySchemaElement::builder().attribute_name(self.key).key_type(KeyType::Hash).build().expect("complete"))
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(self.key)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .expect("complete"),
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match created {
            Ok(_) => tracing::info!(table = %self.name, "created the {}", self.what),
            // Another worker created it first.
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {}
            Err(e) => return Err(self.error("CreateTable", e)),
        }
        Ok(())
    }

    /// A table of ours is keyed by `key` alone; any other table is not one.
    fn check_key_schema(&self, schema: &[KeySchemaElement]) -> Result<(), LeaseError> {
        let keys: Vec<String> = schema.iter().map(|k| format!("`{}` ({})", k.attribute_name(), k.key_type().as_str())).collect();
        if schema.len() == 1 && schema[0].attribute_name() == self.key && schema[0].key_type() == &KeyType::Hash {
            return Ok(());
        }
        Err(LeaseError::Aws(AwsError::Service {
            operation: "DescribeTable",
            code: "NotALeaseTable".into(),
            message: format!(
                "the table `{}` is keyed by {}, not by `{}` (HASH), so it is not a {what}; \
                 --application names the {what}: choose an application name of its own",
                self.name,
                keys.join(", "),
                self.key,
                what = self.what,
            ),
        }))
    }

    /// Polls until the table is active. (The SDK's waiter sleeps 20 s
    /// before its first look; a new on-demand table is active well before.)
    async fn wait_active(&self) -> Result<(), LeaseError> {
        let deadline = tokio::time::Instant::now() + TABLE_ACTIVE_TIMEOUT;
        loop {
            let described = self.client.describe_table().table_name(&self.name).send().await;
            let status = described.map_err(|e| self.error("DescribeTable", e))?.table.and_then(|t| t.table_status);
            if status == Some(TableStatus::Active) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LeaseError::Aws(AwsError::Service {
                    operation: "DescribeTable",
                    code: "TableNotActive".into(),
                    message: format!("the {} `{}` is still {status:?} after {TABLE_ACTIVE_TIMEOUT:?}", self.what, self.name),
                }));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
