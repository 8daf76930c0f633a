//! What an AWS call's failure means, in words an operator can act on.

use std::error::Error as StdError;

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
/// An AWS call that failed, named for what the operator should fix.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// No region in the settings, the environment or the profile.
    #[error("no AWS region is configured; set AWS_REGION or pass --region")]
    NoRegion,
    /// The stream does not exist (or was deleted).
    #[error("Kinesis stream `{0}` does not exist in this account and region; check --stream and AWS_REGION")]
    StreamNotFound(String),
    /// The DynamoDB stream does not exist (or is past its 24 hours after the
    /// table's stream was turned off).
    #[error("DynamoDB stream `{0}` does not exist in this account and region; check --stream (or --dynamodb-table) and AWS_REGION")]
    DynamoDbStreamNotFound(String),
    /// A table kcl-host needs does not exist.
    #[error("DynamoDB table `{0}` does not exist")]
    TableMissing(String),
    #[error(
        "no AWS credentials were found for {operation} (looked in the environment, the shared config and credentials \
         files, web identity, ECS and EC2 instance metadata{failed}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
         or AWS_PROFILE (with ~/.aws/credentials or SSO), or run where an IAM role is given (EC2, ECS, EKS)"
    )]
    /// The SDK's credential chain found nothing. `failed` is what the
    /// provider that failed (rather than found nothing) said, if one did.
    #[allow(missing_docs)] // fields named in the message
    NoCredentials { operation: &'static str, failed: String },
    /// IAM refused the call.
    #[error("access denied for {operation}: {message}; check the credentials and their IAM policy")]
    #[allow(missing_docs)] // fields named in the message
    AccessDenied { operation: &'static str, message: String },
    /// No answer from the endpoint (refused, reset, timed out).
    #[error("cannot reach the {} endpoint for {operation}: {message}; check the endpoint settings and the network", service.names().0)]
    #[allow(missing_docs)] // fields named in the message
    Unreachable { service: Service, operation: &'static str, message: String },
    /// Throttled after every retry.
    #[error("{operation} was throttled and retries ran out: {message}")]
    #[allow(missing_docs)] // fields named in the message
    Throttled { operation: &'static str, message: String },
    /// Any other error the service returned.
    #[error("{operation} failed: {code}: {message}")]
    #[allow(missing_docs)] // fields named in the message
    Service { operation: &'static str, code: String, message: String },
}

impl AwsError {
    /// Whether the same call may well succeed later: the network, throttling
    /// or the service's own failure — not a missing resource, denied
    /// access, or a request the service refuses.
    pub fn is_transient(&self) -> bool {
        match self {
            AwsError::Unreachable { .. } | AwsError::Throttled { .. } => true,
            AwsError::Service { code, .. } => !(code.starts_with("KMS") || matches!(code.as_str(), "InvalidArgumentException" | "ValidationException")),
            AwsError::NoRegion
            | AwsError::NoCredentials { .. }
            | AwsError::StreamNotFound(_)
            | AwsError::DynamoDbStreamNotFound(_)
            | AwsError::TableMissing(_)
            | AwsError::AccessDenied { .. } => false,
        }
    }

    /// Turns an SDK error into a typed one. `resource` names the stream or
    /// table the call was about, for "not found".
    pub fn from_sdk<E, R>(service: Service, operation: &'static str, resource: &str, error: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + StdError + 'static,
        R: std::fmt::Debug,
    {
        let code = error.code().unwrap_or_default().to_owned();
        let message = error.message().map(str::to_owned).unwrap_or_else(|| chain(&error));
        match (&error, code.as_str()) {
            (SdkError::DispatchFailure(_), _) if let Some(credentials) = credentials_error(error.source()) => {
                let failed = match credentials {
                    CredentialsError::CredentialsNotLoaded(_) => String::new(),
                    failed => format!("; the last to fail said: {}", chain(failed)),
                };
                AwsError::NoCredentials { operation, failed }
            }
            (SdkError::DispatchFailure(_) | SdkError::TimeoutError(_), _) => {
                AwsError::Unreachable { service, operation, message: chain(&error) }
            }
            (_, "ResourceNotFoundException") => match service {
                Service::Kinesis => AwsError::StreamNotFound(resource.to_owned()),
                Service::DynamoDb => AwsError::TableMissing(resource.to_owned()),
                Service::DynamoDbStreams => AwsError::DynamoDbStreamNotFound(resource.to_owned()),
            },
            (_, "AccessDeniedException" | "UnrecognizedClientException" | "InvalidSignatureException" | "ExpiredTokenException") => {
                AwsError::AccessDenied { operation, message }
            }
            (_, c) if c.contains("Throughput") || c.contains("Throttl") || c == "LimitExceededException" => {
                AwsError::Throttled { operation, message }
            }
            _ => AwsError::Service { operation, code: if code.is_empty() { "error".into() } else { code }, message },
        }
    }
}

/// Which service a call went to, for messages.
#[derive(Clone, Copy, Debug)]
pub enum Service {
    /// Amazon Kinesis Data Streams.
    Kinesis,
    /// Amazon DynamoDB.
    DynamoDb,
    /// Amazon DynamoDB Streams.
    DynamoDbStreams,
}

impl Service {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Service::Kinesis => ("Kinesis", "KINESIS"),
            Service::DynamoDb => ("DynamoDB", "DYNAMODB"),
            Service::DynamoDbStreams => ("DynamoDB Streams", "DYNAMODB_STREAMS"),
        }
    }
}

/// The credential chain's error among the causes from `cause` on: the call
/// was never sent for want of credentials.
fn credentials_error<'a>(cause: Option<&'a (dyn StdError + 'static)>) -> Option<&'a CredentialsError> {
    std::iter::successors(cause, |e| (*e).source()).find_map(|e| e.downcast_ref::<CredentialsError>())
}

/// "outer: inner: innermost", so a dispatch failure shows its cause.
fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
