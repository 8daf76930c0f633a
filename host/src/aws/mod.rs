//! Kinesis, DynamoDB, DynamoDB Streams and CloudWatch clients from the
//! standard AWS configuration chain, and errors that say what went wrong in
//! words an operator can act on ([`AwsError`]).
//!
//! Region, profile, credentials and endpoints come from the usual places
//! (`AWS_REGION`, `AWS_PROFILE`, `~/.aws/config`, `AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_KINESIS`, `AWS_ENDPOINT_URL_DYNAMODB`, ...); flags
//! override them. A region alone is enough against real AWS. Throttling
//! (`ProvisionedThroughputExceededException`, `LimitExceededException`,
//! DynamoDB throttling) is retried by the SDK's standard retry strategy with
//! jittered exponential backoff.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, ConfigLoader, Region};

mod error;
mod requests;
pub use error::{AwsError, Service};
pub use requests::RequestCounts;

/// Time-outs for state reads and commits: a transaction of 100 items or a
/// read of 100 keys takes longer than the DynamoDB client's
/// [`DYNAMODB_FIRST_BYTE`] (kept short for renewals), and nothing about
/// them is urgent.
pub fn patient() -> aws_sdk_dynamodb::config::Builder {
    let timeouts = TimeoutConfig::builder().read_timeout(Duration::from_secs(10)).operation_attempt_timeout(Duration::from_secs(15)).build();
    aws_sdk_dynamodb::config::Builder::default().timeout_config(timeouts)
}

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
            Service::DynamoDbStreams => (&None, "DYNAMODB_STREAMS"),
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
    /// The DynamoDB Streams client (a source: `--stream` naming a table's
    /// stream); its endpoint comes from the chain (`AWS_ENDPOINT_URL_DYNAMODB_STREAMS`).
    pub dynamodb_streams: aws_sdk_dynamodbstreams::Client,
    /// The CloudWatch client (`--metrics cloudwatch`); its endpoint comes
    /// from the chain (`AWS_ENDPOINT_URL_CLOUDWATCH`).
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// Every request both clients sent.
    pub requests: RequestCounts,
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
            dynamodb_streams: aws_sdk_dynamodbstreams::Client::new(&config),
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
