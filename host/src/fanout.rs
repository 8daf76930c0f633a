//! Enhanced fan-out: the application reads through a registered stream
//! consumer with `SubscribeToShard`, each shard at up to 2 MB/s of its own,
//! pushed over one long-lived response instead of polled.
//!
//! A subscription lasts at most five minutes: the [`Subscriber`] then
//! subscribes again after the last continuation sequence number. An event
//! with no continuation sequence number ends the shard (its child shards
//! come with it). Right after a handoff the previous owner's subscription
//! may still be open, and Kinesis answers `ResourceInUseException`: the
//! subscriber backs off and tries again.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use aws_sdk_kinesis::types::{ConsumerStatus, ShardIteratorType, SubscribeToShardEventStream};
use aws_sdk_kinesis::Client;
use aws_smithy_types::DateTime;
use tokio::time::Instant;

use crate::aws::{AwsError, Service};
use crate::backoff::Backoff;
use crate::config::Retrieval;
use crate::fetch::{user_records, Fetched, ShardReader, StartingPosition};
use crate::metrics::Reads;
use crate::records::kpl::HashRange;
use crate::records::Position;

/// Kinesis ends every subscription after five minutes.
const SUBSCRIPTION_LIFETIME: Duration = Duration::from_secs(300);
/// First and longest wait after `ResourceInUseException`.
const IN_USE_BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(10));
/// Longest wait for a newly registered consumer to become active.
const CONSUMER_ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// One event of a subscription.
#[derive(Debug, Default)]
pub struct Event {
    /// The records, as the SDK gives them.
    pub records: Vec<aws_sdk_kinesis::types::Record>,
    /// Where the next subscription continues; `None` at the shard's end.
    pub continuation: Option<String>,
    /// How far behind the tip of the shard these records are.
    pub millis_behind_latest: u64,
    /// Set on the last event of a closed shard: its children.
    pub child_shards: BTreeSet<String>,
}

/// Why a subscription could not be opened.
#[derive(Debug)]
pub enum SubscribeError {
    /// Another subscription to this shard through the same consumer is open
    /// (the previous owner's, after a handoff).
    InUse,
    /// Subscribing failed for another reason.
    Failed(AwsError),
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An open subscription's events.
pub trait Events: Send {
    /// The next event; `None` once the subscription ended.
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Event>, AwsError>>;
}

/// Opens subscriptions: `SubscribeToShard` in production, a fake in tests.
pub trait Subscriptions: Send + 'static {
    /// Opens a subscription to `shard` from `start`.
    fn subscribe(&mut self, shard: &str, start: &StartingPosition) -> BoxFuture<'_, Result<Box<dyn Events>, SubscribeError>>;
}

/// Reads one shard through subscriptions, resubscribing as they end.
pub struct Subscriber<S> {
    subscriptions: S,
    shard: String,
    range: Option<HashRange>,
    resume: StartingPosition,
    skip_through: Option<Position>,
    current: Option<(Box<dyn Events>, Instant)>,
}

impl<S: Subscriptions> Subscriber<S> {
    /// A reader of `shard` from `start` through `subscriptions`; `range` is the lease's hash key range.
    pub fn new(subscriptions: S, shard: &str, start: StartingPosition, range: Option<HashRange>) -> Self {
        let skip_through = start.skip_through();
        Self { subscriptions, shard: shard.to_owned(), range, resume: start, skip_through, current: None }
    }

    /// An open subscription, subscribing (again) when there is none or the
    /// current one is at the end of its lifetime.
    async fn events(&mut self) -> Result<&mut Box<dyn Events>, AwsError> {
        if self.current.as_ref().is_some_and(|(_, opened)| opened.elapsed() >= SUBSCRIPTION_LIFETIME) {
            self.current = None;
        }
        let mut backoff = Backoff::new(IN_USE_BACKOFF.0, IN_USE_BACKOFF.1);
        while self.current.is_none() {
            match self.subscriptions.subscribe(&self.shard, &self.resume).await {
                Ok(events) => self.current = Some((events, Instant::now())),
                Err(SubscribeError::InUse) => {
                    let wait = backoff.next_wait();
                    tracing::info!(shard = %self.shard, "the shard's previous subscription is still open; subscribing again in {wait:?}");
                    tokio::time::sleep(wait).await;
                }
                Err(SubscribeError::Failed(e)) => return Err(e),
            }
        }
        Ok(&mut self.current.as_mut().expect("just opened").0)
    }
}

impl<S: Subscriptions> ShardReader for Subscriber<S> {
    async fn next(&mut self) -> Result<Fetched, AwsError> {
        loop {
            let event = match self.events().await?.next().await {
                Ok(Some(event)) => event,
                // Ended (its five minutes, or the server closed it): continue in a new one.
                Ok(None) => {
                    self.current = None;
                    continue;
                }
                Err(e) => {
                    self.current = None;
                    return Err(e);
                }
            };
            let mut batch = user_records(&self.shard, &event.records, self.range.as_ref(), &mut self.skip_through)?;
            batch.millis_behind_latest = event.millis_behind_latest;
            let shard_end = match event.continuation {
                Some(continuation) => {
                    self.resume = StartingPosition::After(continuation);
                    None
                }
                None => Some(event.child_shards),
            };
            // An empty event at the tip is passed on: the clock of `--window`.
            if batch.is_empty() && shard_end.is_none() && batch.millis_behind_latest > 0 {
                continue;
            }
            return Ok(Fetched { batch, shard_end, reads: Reads::default(), read_at_ms: crate::clock::unix_ms() });
        }
    }
}

/// The subscriptions a worker reads through with enhanced fan-out, the
/// application's stream consumer registered first; `None` when it polls.
pub async fn subscriptions(retrieval: Retrieval, client: &Client, stream: &str, application: &str) -> Result<Option<KinesisSubscriptions>, AwsError> {
    if retrieval == Retrieval::Polling {
        return Ok(None);
    }
    let consumer_arn = register_consumer(client, stream, application).await?;
    tracing::info!(consumer = %consumer_arn, "reading with enhanced fan-out");
    Ok(Some(KinesisSubscriptions { client: client.clone(), consumer_arn, stream: stream.to_owned() }))
}

/// The application's stream consumer: registered on first use (by any
/// worker), described when it exists; returns its ARN once it is active.
pub async fn register_consumer(client: &Client, stream: &str, name: &str) -> Result<String, AwsError> {
    let summary = client
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(Service::Kinesis, "DescribeStreamSummary", stream, e))?;
    let stream_arn = summary.stream_description_summary.map(|s| s.stream_arn).unwrap_or_default();
    match client.register_stream_consumer().stream_arn(&stream_arn).consumer_name(name).send().await {
        Ok(_) => tracing::info!(consumer = name, "registered the enhanced fan-out consumer"),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {}
        Err(e) => return Err(AwsError::from_sdk(Service::Kinesis, "RegisterStreamConsumer", stream, e)),
    }
    let deadline = Instant::now() + CONSUMER_ACTIVE_TIMEOUT;
    loop {
        let described = client
            .describe_stream_consumer()
            .stream_arn(&stream_arn)
            .consumer_name(name)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(Service::Kinesis, "DescribeStreamConsumer", stream, e))?;
        let consumer = described.consumer_description.ok_or_else(|| AwsError::Service {
            operation: "DescribeStreamConsumer",
            code: "NoConsumer".into(),
            message: format!("no description of consumer `{name}`"),
        })?;
        if consumer.consumer_status == ConsumerStatus::Active {
            return Ok(consumer.consumer_arn);
        }
        if Instant::now() >= deadline {
            return Err(AwsError::Service {
                operation: "DescribeStreamConsumer",
                code: "ConsumerNotActive".into(),
                message: format!("consumer `{name}` is still {:?} after {CONSUMER_ACTIVE_TIMEOUT:?}", consumer.consumer_status),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `SubscribeToShard` through a registered consumer.
#[derive(Clone)]
pub struct KinesisSubscriptions {
    /// The Kinesis client.
    pub client: Client,
    /// The registered stream consumer.
    pub consumer_arn: String,
    /// The stream, for messages.
    pub stream: String,
}

impl Subscriptions for KinesisSubscriptions {
    fn subscribe(&mut self, shard: &str, start: &StartingPosition) -> BoxFuture<'_, Result<Box<dyn Events>, SubscribeError>> {
        let position = starting_position(start);
        let request = self.client.subscribe_to_shard().consumer_arn(&self.consumer_arn).shard_id(shard).starting_position(position);
        Box::pin(async move {
            match request.send().await {
                Ok(output) => Ok(Box::new(KinesisEvents { stream: self.stream.clone(), events: output.event_stream }) as Box<dyn Events>),
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => Err(SubscribeError::InUse),
                Err(e) => Err(SubscribeError::Failed(AwsError::from_sdk(Service::Kinesis, "SubscribeToShard", &self.stream, e))),
            }
        })
    }
}

fn starting_position(start: &StartingPosition) -> aws_sdk_kinesis::types::StartingPosition {
    let position = aws_sdk_kinesis::types::StartingPosition::builder();
    let position = match start {
        StartingPosition::TrimHorizon => position.r#type(ShardIteratorType::TrimHorizon),
        StartingPosition::Latest => position.r#type(ShardIteratorType::Latest),
        StartingPosition::AtTimestamp(ms) => position.r#type(ShardIteratorType::AtTimestamp).timestamp(DateTime::from_millis(*ms)),
        StartingPosition::At(seq) => position.r#type(ShardIteratorType::AtSequenceNumber).sequence_number(seq),
        StartingPosition::Checkpoint(p) => position.r#type(ShardIteratorType::AtSequenceNumber).sequence_number(p.sequence_number()),
        StartingPosition::After(seq) => position.r#type(ShardIteratorType::AfterSequenceNumber).sequence_number(seq),
    };
    position.build().expect("the type is set")
}

struct KinesisEvents {
    stream: String,
    events: aws_sdk_kinesis::primitives::event_stream::EventReceiver<
        SubscribeToShardEventStream,
        aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError,
    >,
}

impl Events for KinesisEvents {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Event>, AwsError>> {
        Box::pin(async move {
            loop {
                let event = match self.events.recv().await {
                    Ok(Some(SubscribeToShardEventStream::SubscribeToShardEvent(event))) => event,
                    Ok(Some(_)) => continue, // an event type this SDK does not know
                    Ok(None) => return Ok(None),
                    Err(e) => return Err(AwsError::from_sdk(Service::Kinesis, "SubscribeToShard (event)", &self.stream, e)),
                };
                let continuation = Some(event.continuation_sequence_number).filter(|c| !c.is_empty());
                return Ok(Some(Event {
                    child_shards: event.child_shards.unwrap_or_default().into_iter().map(|c| c.shard_id).collect(),
                    records: event.records,
                    continuation,
                    millis_behind_latest: event.millis_behind_latest.max(0) as u64,
                }));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Subscriptions scripted in advance: each subscribe takes the next
    /// answer; each answer's events are handed out in order, then the
    /// subscription ends.
    /// One scripted answer to a subscribe: the subscription's events, or why it failed.
    type Answer = Result<Vec<Event>, SubscribeError>;

    #[derive(Clone, Default)]
    struct Script {
        answers: Arc<Mutex<VecDeque<Answer>>>,
        subscribed_from: Arc<Mutex<Vec<StartingPosition>>>,
    }

    struct Scripted(VecDeque<Event>);

    impl Events for Scripted {
        fn next(&mut self) -> BoxFuture<'_, Result<Option<Event>, AwsError>> {
            let event = self.0.pop_front();
            Box::pin(async move { Ok(event) })
        }
    }

    impl Subscriptions for Script {
        fn subscribe(&mut self, _: &str, start: &StartingPosition) -> BoxFuture<'_, Result<Box<dyn Events>, SubscribeError>> {
            self.subscribed_from.lock().unwrap().push(start.clone());
            let answer = self.answers.lock().unwrap().pop_front().expect("a scripted answer");
            Box::pin(async move { answer.map(|events| Box::new(Scripted(events.into())) as Box<dyn Events>) })
        }
    }

    fn record(seq: &str) -> aws_sdk_kinesis::types::Record {
        aws_sdk_kinesis::types::Record::builder()
            .sequence_number(seq)
            .partition_key("k")
            .data(aws_smithy_types::Blob::new(seq.as_bytes()))
            .build()
            .unwrap()
    }

    fn event(seqs: &[&str], continuation: Option<&str>) -> Event {
        Event {
            records: seqs.iter().map(|s| record(s)).collect(),
            continuation: continuation.map(str::to_owned),
            ..Event::default()
        }
    }

    fn data(fetched: &Fetched) -> Vec<&str> {
        fetched.batch.iter().map(|r| std::str::from_utf8(r.data).unwrap()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_that_ends_continues_after_its_continuation() {
        let script = Script::default();
        script.answers.lock().unwrap().extend([
            Ok(vec![event(&["1", "2"], Some("2")), event(&[], Some("5"))]),
            Ok(vec![event(&["6"], Some("6"))]),
        ]);
        let mut subscriber = Subscriber::new(script.clone(), "s", StartingPosition::TrimHorizon, None);
        assert_eq!(data(&subscriber.next().await.unwrap()), ["1", "2"]);
        let tip = subscriber.next().await.unwrap();
        assert!(tip.batch.is_empty() && tip.shard_end.is_none(), "an empty event at the tip is passed on (the clock of --window)");
        assert_eq!(data(&subscriber.next().await.unwrap()), ["6"], "the empty event moved the continuation only");
        assert_eq!(
            *script.subscribed_from.lock().unwrap(),
            [StartingPosition::TrimHorizon, StartingPosition::After("5".into())]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_continuation_ends_the_shard_with_its_children() {
        let script = Script::default();
        let mut last = event(&["9"], None);
        last.child_shards = BTreeSet::from(["c1".to_owned(), "c2".to_owned()]);
        script.answers.lock().unwrap().push_back(Ok(vec![event(&["8"], Some("8")), last]));
        let mut subscriber = Subscriber::new(script, "s", StartingPosition::TrimHorizon, None);
        assert_eq!(subscriber.next().await.unwrap().shard_end, None);
        let end = subscriber.next().await.unwrap();
        assert_eq!(data(&end), ["9"]);
        assert_eq!(end.shard_end, Some(BTreeSet::from(["c1".to_owned(), "c2".to_owned()])));
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_handoff_the_previous_subscription_is_waited_out() {
        let script = Script::default();
        script.answers.lock().unwrap().extend([
            Err(SubscribeError::InUse),
            Err(SubscribeError::InUse),
            Ok(vec![event(&["3", "4"], Some("4"))]),
        ]);
        let checkpoint = Position::new("3", 0).unwrap();
        let mut subscriber = Subscriber::new(script.clone(), "s", StartingPosition::Checkpoint(checkpoint.clone()), None);
        let started = Instant::now();
        assert_eq!(data(&subscriber.next().await.unwrap()), ["4"], "the checkpointed record is read again and skipped");
        assert_eq!(started.elapsed(), IN_USE_BACKOFF.0 * 3, "backed off 0.5 s, then 1 s");
        assert!(script.subscribed_from.lock().unwrap().iter().all(|s| *s == StartingPosition::Checkpoint(checkpoint.clone())));
    }
}
