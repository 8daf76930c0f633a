//! Every request both clients send, counted by service and operation: the
//! exit line's `requests sent:`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;

/// Requests sent, by service and operation (`DynamoDB.Scan`), every attempt
/// counted: what the services bill and throttle.
#[derive(Clone, Debug, Default)]
pub struct RequestCounts(Arc<Mutex<BTreeMap<String, u64>>>);

impl RequestCounts {
    /// Requests sent so far, per `service operation`.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl Intercept for RequestCounts {
    fn name(&self) -> &'static str {
        "RequestCounts"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Both services speak AWS JSON: `X-Amz-Target: Kinesis_20131202.GetRecords`.
        let target = context.request().headers().get("x-amz-target").unwrap_or("unknown.unknown");
        let (service, operation) = target.split_once('.').unwrap_or((target, ""));
        let service = service.split('_').next().unwrap_or(service);
        *self.0.lock().expect("not poisoned").entry(format!("{service}.{operation}")).or_default() += 1;
        Ok(())
    }
}
