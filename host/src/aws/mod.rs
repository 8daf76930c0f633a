//! Kinesis, DynamoDB and CloudWatch clients from the standard AWS configuration chain,
//! and errors that say what went wrong in words an operator can act on.
//!
//! Region, profile, credentials and endpoints come from the usual places
//! (`AWS_REGION`, `AWS_PROFILE`, `~/.aws/config`, `AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_KINESIS`, `AWS_ENDPOINT_URL_DYNAMODB`, ...); flags
//! override them. A region alone is enough against real AWS. Throttling
//! (`ProvisionedThroughputExceededException`, `LimitExceededException`,
//! DynamoDB throttling) is retried by the SDK's standard retry strategy with
//! jittered exponential backoff.

use std::error::Error as StdError;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, ConfigLoader, Region};
use aws_credential_types::provider::error::CredentialsError;

mod requests;
pub use requests::RequestCounts;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

/// Longest one attempt of a Kinesis or DynamoDB call may take (GetRecords
/// answers within a few seconds; a lease write within milliseconds).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a DynamoDB request may wait for the first byte of its answer
/// before it is sent again: lease rows and checkpoints answer in
/// milliseconds, so one silent this long went into a dead connection, and
/// waiting out the whole attempt would keep the leases from being renewed
/// for seconds after the network is back.
const DYNAMODB_FIRST_BYTE: Duration = Duration::from_secs(1);

/// Settings that override the standard chain.
#[derive(Clone, Debug, Default)]
pub struct AwsSettings {
    /// `--region`; the SDK's chain (`AWS_REGION`, the profile) when unset.
    pub region: Option<String>,
    /// `--profile`: a named profile of `~/.aws/config`.
    pub profile: Option<String>,
    /// `--kinesis-endpoint`: another Kinesis endpoint (a local server).
    pub kinesis_endpoint: Option<String>,
    /// `--dynamodb-endpoint`: another DynamoDB endpoint (a local server).
    pub dynamodb_endpoint: Option<String>,
    /// Per-attempt timeout of every call [default: 5 s]; the whole call,
    /// retries included, gets three times that.
    pub attempt_timeout: Option<Duration>,
}

impl AwsSettings {
    /// Which endpoint `service` is called at and which setting chose it, for
    /// the message when it cannot be reached.
    pub fn endpoint_origin(&self, service: Service) -> String {
        let (flag, upper) = match service {
            Service::Kinesis => (&self.kinesis_endpoint, "KINESIS"),
            Service::DynamoDb => (&self.dynamodb_endpoint, "DYNAMODB"),
        };
        if let Some(url) = flag {
            let name = upper.to_lowercase();
            return format!("`{url}`, from --{name}-endpoint (or `{name}_endpoint` in the config file)");
        }
        for var in [format!("AWS_ENDPOINT_URL_{upper}"), "AWS_ENDPOINT_URL".to_owned()] {
            if let Ok(url) = std::env::var(&var) {
                return format!("`{url}`, from {var}");
            }
        }
        "the region's public endpoint (or one set in the AWS config profile)".to_owned()
    }
}

/// The clients a worker needs.
#[derive(Clone, Debug)]
pub struct AwsClients {
    /// The Kinesis client.
    pub kinesis: aws_sdk_kinesis::Client,
    /// The DynamoDB client.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// The CloudWatch client (`--metrics cloudwatch`); its endpoint comes
    /// from the chain (`AWS_ENDPOINT_URL_CLOUDWATCH`).
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// Every request both clients sent.
    pub requests: RequestCounts,
}

/// An AWS call that failed, named for what the operator should fix.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// No region in the settings, the environment or the profile.
    #[error("no AWS region is configured; set AWS_REGION or pass --region")]
    NoRegion,
    /// The stream does not exist (or was deleted).
    #[error("Kinesis stream `{0}` does not exist in this account and region; check --stream and AWS_REGION")]
    StreamNotFound(String),
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
}

impl Service {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Service::Kinesis => ("Kinesis", "KINESIS"),
            Service::DynamoDb => ("DynamoDB", "DYNAMODB"),
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

/// Every call has a deadline, so one hung request cannot hold up a renewal
/// round or a reader; an attempt that times out is retried.
fn timeouts(settings: &AwsSettings) -> aws_config::timeout::TimeoutConfigBuilder {
    let attempt = settings.attempt_timeout.unwrap_or(ATTEMPT_TIMEOUT);
    TimeoutConfig::builder().connect_timeout(Duration::from_secs(3)).operation_attempt_timeout(attempt).operation_timeout(attempt * 3)
}

impl AwsClients {
    /// Clients from the standard chain plus `settings`.
    pub async fn from_env(settings: &AwsSettings) -> Result<Self, AwsError> {
        Self::from_loader(aws_config::defaults(BehaviorVersion::latest()), settings).await
    }

    /// Clients from a given loader (tests pass one with a fake environment).
    pub async fn from_loader(mut loader: ConfigLoader, settings: &AwsSettings) -> Result<Self, AwsError> {
        if let Some(region) = &settings.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(profile) = &settings.profile {
            loader = loader.profile_name(profile);
        }
        let config = loader
            .retry_config(RetryConfig::standard().with_max_attempts(6).with_initial_backoff(Duration::from_millis(100)))
            .timeout_config(timeouts(settings).build())
            .load()
            .await;
        if config.region().is_none() {
            return Err(AwsError::NoRegion);
        }
        let requests = RequestCounts::default();
        let mut kinesis = aws_sdk_kinesis::config::Builder::from(&config).interceptor(requests.clone());
        if let Some(url) = &settings.kinesis_endpoint {
            kinesis = kinesis.endpoint_url(url);
        }
        let mut dynamodb = aws_sdk_dynamodb::config::Builder::from(&config)
            .timeout_config(timeouts(settings).read_timeout(DYNAMODB_FIRST_BYTE).build())
            .interceptor(requests.clone());
        if let Some(url) = &settings.dynamodb_endpoint {
            dynamodb = dynamodb.endpoint_url(url);
        }
        Ok(Self {
            kinesis: aws_sdk_kinesis::Client::from_conf(kinesis.build()),
            dynamodb: aws_sdk_dynamodb::Client::from_conf(dynamodb.build()),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&config),
            requests,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::config::interceptors::BeforeTransmitInterceptorContextRef;
    use aws_sdk_kinesis::config::{ConfigBag, Intercept, RuntimeComponents};
    use aws_types::os_shim_internal::Env;
    use std::sync::{Arc, Mutex};

    /// Records the URL a request would go to, then stops it before it is sent.
    #[derive(Debug, Clone, Default)]
    struct CaptureUrl(Arc<Mutex<Option<String>>>);

    impl Intercept for CaptureUrl {
        fn name(&self) -> &'static str {
            "CaptureUrl"
        }

        fn read_before_transmit(
            &self,
            context: &BeforeTransmitInterceptorContextRef<'_>,
            _: &RuntimeComponents,
            _: &mut ConfigBag,
        ) -> Result<(), aws_sdk_kinesis::error::BoxError> {
            *self.0.lock().unwrap() = Some(context.request().uri().to_string());
            Err("stopped before sending".into())
        }
    }

    async fn clients(env: &[(&str, &str)], settings: AwsSettings) -> Result<AwsClients, AwsError> {
        let loader = aws_config::defaults(BehaviorVersion::latest())
            .env(Env::from_slice(env))
            .test_credentials();
        AwsClients::from_loader(loader, &settings).await
    }

    async fn kinesis_url(clients: &AwsClients) -> String {
        let capture = CaptureUrl::default();
        let config = clients.kinesis.config().to_builder().interceptor(capture.clone()).build();
        let _ = aws_sdk_kinesis::Client::from_conf(config).list_shards().stream_name("s").send().await;
        capture.0.lock().unwrap().clone().expect("request reached the transmit stage")
    }

    async fn dynamodb_url(clients: &AwsClients) -> String {
        let capture = CaptureUrl::default();
        let config = clients.dynamodb.config().to_builder().interceptor(capture.clone()).build();
        let _ = aws_sdk_dynamodb::Client::from_conf(config).list_tables().send().await;
        capture.0.lock().unwrap().clone().expect("request reached the transmit stage")
    }

    #[tokio::test]
    async fn a_region_alone_resolves_the_public_endpoints() {
        let c = clients(&[("AWS_REGION", "us-east-2")], AwsSettings::default()).await.unwrap();
        assert_eq!(kinesis_url(&c).await, "https://kinesis.us-east-2.amazonaws.com/");
        assert_eq!(dynamodb_url(&c).await, "https://dynamodb.us-east-2.amazonaws.com/");
    }

    #[tokio::test]
    async fn service_endpoint_variables_win_over_the_shared_one() {
        let env = [
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:4000"),
            ("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:4567"),
        ];
        let c = clients(&env, AwsSettings::default()).await.unwrap();
        assert_eq!(kinesis_url(&c).await, "http://127.0.0.1:4567/");
        assert_eq!(dynamodb_url(&c).await, "http://127.0.0.1:4000/");
    }

    #[tokio::test]
    async fn flags_override_the_environment() {
        let env = [("AWS_REGION", "eu-west-1"), ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:4000")];
        let settings = AwsSettings {
            region: Some("ap-south-1".into()),
            dynamodb_endpoint: Some("http://127.0.0.1:9000".into()),
            ..Default::default()
        };
        let c = clients(&env, settings).await.unwrap();
        assert_eq!(kinesis_url(&c).await, "https://kinesis.ap-south-1.amazonaws.com/");
        assert_eq!(dynamodb_url(&c).await, "http://127.0.0.1:9000/");
    }

    #[tokio::test]
    async fn no_region_is_a_clear_error() {
        let err = clients(&[], AwsSettings::default()).await.unwrap_err();
        assert!(err.to_string().contains("set AWS_REGION or pass --region"), "{err}");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        // Accepts connections and never replies.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let env = [("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_DYNAMODB", url.as_str())];
        let settings = AwsSettings { attempt_timeout: Some(Duration::from_millis(200)), ..Default::default() };
        let c = clients(&env, settings).await.unwrap();
        let call = c.dynamodb.list_tables().send();
        let result = tokio::time::timeout(Duration::from_secs(30), call).await.expect("the call ends by itself");
        let err = AwsError::from_sdk(Service::DynamoDb, "ListTables", "t", result.unwrap_err());
        assert!(matches!(err, AwsError::Unreachable { .. }), "{err}");
        hold.abort();
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_named() {
        // Port 9 (discard) is closed on loopback: the connection is refused at once.
        let env = [("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:9")];
        let c = clients(&env, AwsSettings::default()).await.unwrap();
        let config = c.kinesis.config().to_builder().retry_config(RetryConfig::disabled()).build();
        let err = aws_sdk_kinesis::Client::from_conf(config).list_shards().stream_name("s").send().await.unwrap_err();
        let err = AwsError::from_sdk(Service::Kinesis, "ListShards", "s", err);
        assert!(matches!(err, AwsError::Unreachable { service: Service::Kinesis, .. }), "{err}");
        // The message adds where the endpoint came from (the variable: see the acceptance test).
        let flag = AwsSettings { kinesis_endpoint: Some("http://127.0.0.1:9".into()), ..AwsSettings::default() };
        assert_eq!(
            flag.endpoint_origin(Service::Kinesis),
            "`http://127.0.0.1:9`, from --kinesis-endpoint (or `kinesis_endpoint` in the config file)"
        );
    }
}
