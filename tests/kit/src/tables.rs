//! DynamoDB tables with a stream on, for the DynamoDB Streams tests and
//! benchmarks (on moto: `scripts/servers.sh start --kcl3`).

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, StreamSpecification, StreamViewType,
};

/// Makes table `name`, keyed by `pk` (text) and `sk` (a number), whose
/// stream carries both images; returns the stream's ARN.
pub async fn table_with_stream(dynamodb: &aws_sdk_dynamodb::Client, name: &str) -> String {
    table_with_stream_of(dynamodb, name, StreamViewType::NewAndOldImages).await
}

/// [`table_with_stream`], with a stream of `view`.
pub async fn table_with_stream_of(dynamodb: &aws_sdk_dynamodb::Client, name: &str, view: StreamViewType) -> String {
    let key = |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build().unwrap();
    let attribute = |name: &str, kind| AttributeDefinition::builder().attribute_name(name).attribute_type(kind).build().unwrap();
    let stream = StreamSpecification::builder().stream_enabled(true).stream_view_type(view).build().unwrap();
    let created = dynamodb
        .create_table()
        .table_name(name)
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .attribute_definitions(attribute("pk", ScalarAttributeType::S))
        .attribute_definitions(attribute("sk", ScalarAttributeType::N))
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(stream)
        .send()
        .await
        .expect("CreateTable with a stream (on moto: scripts/servers.sh start --kcl3)");
    created.table_description().and_then(|t| t.latest_stream_arn()).expect("the table's stream").to_owned()
}
