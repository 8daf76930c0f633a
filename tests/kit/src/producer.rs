//! A steady producer: one record on every shard of a stream each tick, in
//! the background, until stopped — the traffic a swap or handoff test runs under.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::TestStream;

/// Records put so far, as `(shard, data)`, in the order they were put.
pub type Produced = Arc<Mutex<Vec<(String, String)>>>;

/// Puts `<prefix>-<n>` records (data and partition key) on every shard.
pub struct Producer {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    produced: Produced,
}

impl Producer {
    /// Starts putting one record per shard of `stream` every `every`.
    pub async fn start(stream: &TestStream, prefix: &str, every: Duration) -> Self {
        let shards: Vec<String> = stream.shards().await.into_iter().map(|s| s.id).collect();
        let stream = TestStream { name: stream.name.clone(), kinesis: stream.kinesis.clone() };
        let (stop, mut stopped) = watch::channel(false);
        let produced = Produced::default();
        let (prefix, log) = (prefix.to_owned(), produced.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut n = 0usize;
            loop {
                tokio::select! {
                    _ = stopped.changed() => return,
                    _ = tick.tick() => {}
                }
                let data: Vec<String> = shards.iter().map(|_| { n += 1; format!("{prefix}-{n}") }).collect();
                let records: Vec<(&str, &[u8], &str)> =
                    shards.iter().zip(&data).map(|(shard, d)| (shard.as_str(), d.as_bytes(), d.as_str())).collect();
                stream.put_to(&records).await;
                log.lock().unwrap().extend(shards.iter().cloned().zip(data));
            }
        });
        Self { stop, task, produced }
    }

    /// How many records it has put so far.
    pub fn count(&self) -> usize {
        self.produced.lock().unwrap().len()
    }

    /// Stops after the put in progress; returns every record put.
    pub async fn stop(self) -> Vec<(String, String)> {
        self.stop.send_replace(true);
        self.task.await.expect("the producer does not panic");
        Arc::try_unwrap(self.produced).expect("the task is done").into_inner().unwrap()
    }
}
