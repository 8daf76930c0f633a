//! Records given up on: the JSON envelope each one is written in, and where
//! it goes — the `on-failure` target, or, without one, the log (in full)
//! and a count of records skipped.
//!
//! The envelope, one per record (written as the record's data, partitioned
//! by its partition key):
//!
//! ```json
//! {"stream":"orders","shard":"shardId-000000000001",
//!  "sequence_number":"4968…","sub_sequence_number":null,"partition_key":"k-7",
//!  "arrival":"2026-12-04T03:12:56.411Z","data":"<base64>",
//!  "condition":"RetryAttemptsExhausted","attempts":3,
//!  "error":"processor trapped: …","processor":"ea8295cdfaa8 (orders@1.2.0)",
//!  "given_up_at":"2026-12-04T03:13:01.002Z"}
//! ```
//!
//! A record too large for the target with its data in base64 is written
//! without `data` (and with `data_omitted` saying why); its data then goes
//! to the log, so it is never dropped silently.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_smithy_types::date_time::{DateTime, Format};
use base64::Engine as _;
use serde::Serialize;

use super::FailureSettings;
use crate::aws::AwsClients;
use crate::clock;
use crate::output::record::OutRecord;
use crate::output::{OutputSpec, Outputs};
use crate::records::{Batch, Record};

/// The name the failure target is written under (in the output metrics).
pub const ON_FAILURE: &str = "on-failure";

/// Why a record was given up on (Lambda's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Condition {
    /// It failed more than `max-retry-attempts` times.
    RetryAttemptsExhausted,
    /// It was older than `max-record-age` when it was read.
    RecordAgeExceeded,
}

/// One record given up on, as the failure target receives it.
#[derive(Debug, Serialize)]
pub struct DeadLetter<'a> {
    /// The stream read.
    pub stream: &'a str,
    /// The shard the record is in.
    pub shard: &'a str,
    /// Its sequence number.
    pub sequence_number: &'a str,
    /// Its position in its KPL aggregate, when it came from one.
    pub sub_sequence_number: Option<u64>,
    /// Its partition key.
    pub partition_key: &'a str,
    /// Its explicit hash key, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explicit_hash_key: Option<&'a str>,
    /// When Kinesis accepted it (RFC 3339).
    pub arrival: String,
    /// Its data, base64; absent when `data_omitted` says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Why the data is not here (the envelope would not fit the target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_omitted: Option<String>,
    /// Why it was given up on.
    pub condition: Condition,
    /// Failed calls on it (0 for a record too old to be delivered).
    pub attempts: u32,
    /// The last error (a message the processor returned, a trap, a deadline).
    pub error: &'a str,
    /// The processor version that failed on it.
    pub processor: &'a str,
    /// When it was given up on (RFC 3339).
    pub given_up_at: String,
}

/// What is known of a give-up beyond the records themselves.
#[derive(Clone, Copy, Debug)]
pub struct GiveUp<'a> {
    /// The stream the records are in.
    pub stream: &'a str,
    /// The shard the records are in.
    pub shard: &'a str,
    /// Why.
    pub condition: Condition,
    /// Failed calls on them.
    pub attempts: u32,
    /// The last error.
    pub error: &'a str,
    /// The processor version.
    pub processor: &'a str,
}

fn rfc3339(ms: u64) -> String {
    DateTime::from_millis(ms as i64).fmt(Format::DateTime).unwrap_or_else(|_| ms.to_string())
}

impl<'a> DeadLetter<'a> {
    /// The envelope of `record`.
    pub fn new(record: &Record<'a>, why: &GiveUp<'a>) -> Self {
        Self {
            stream: why.stream,
            shard: why.shard,
            sequence_number: record.sequence_number,
            sub_sequence_number: record.sub_sequence_number,
            partition_key: record.partition_key,
            explicit_hash_key: record.explicit_hash_key,
            arrival: rfc3339(record.arrival_timestamp_ms),
            data: Some(base64::engine::general_purpose::STANDARD.encode(record.data)),
            data_omitted: None,
            condition: why.condition,
            attempts: why.attempts,
            error: why.error,
            processor: why.processor,
            given_up_at: rfc3339(clock::unix_ms()),
        }
    }

    fn json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an envelope serializes")
    }
}

/// Where a worker's records given up on go, and how many went.
pub struct DeadLetters {
    /// The `on-failure` target, as an output of its own.
    target: Option<Arc<Outputs>>,
    written: AtomicU64,
    skipped: AtomicU64,
}

impl DeadLetters {
    /// Connects the `on-failure` target, if there is one (a stream or table
    /// that does not exist is an error at start-up, naming it).
    pub async fn connect(settings: &FailureSettings, clients: &AwsClients, metrics: Option<Arc<crate::metrics::Metrics>>) -> Result<Arc<Self>, String> {
        let target = match &settings.on_failure {
            Some(target) => {
                let spec = OutputSpec { name: ON_FAILURE.into(), target: target.clone() };
                let connected = Outputs::connect(&[spec], clients, 0, metrics).await.map_err(|e| e.replacen("output `on-failure`", "--on-failure", 1))?;
                Some(connected)
            }
            None => None,
        };
        Ok(Arc::new(Self::new(target)))
    }

    /// For `replay`: a file target writes its file, any other prints its
    /// envelopes on stdout.
    pub fn printed(settings: &FailureSettings) -> Arc<Self> {
        let target = settings.on_failure.as_ref().map(|target| Outputs::printed(&[OutputSpec { name: ON_FAILURE.into(), target: target.clone() }], 0, None));
        Arc::new(Self::new(target))
    }

    fn new(target: Option<Arc<Outputs>>) -> Self {
        Self { target, written: AtomicU64::new(0), skipped: AtomicU64::new(0) }
    }

    /// Whether records given up on are kept (rather than skipped).
    pub fn has_target(&self) -> bool {
        self.target.is_some()
    }

    /// Writes an envelope per record of `records` to the target and waits
    /// for its acknowledgement; without a target, logs each in full and
    /// counts it skipped. `Err` when the target kept failing: nothing may
    /// be checkpointed past these records yet.
    pub async fn write(&self, records: &Batch, why: &GiveUp<'_>) -> Result<(), String> {
        let letters: Vec<DeadLetter<'_>> = records.iter().map(|record| DeadLetter::new(&record, why)).collect();
        let Some(target) = &self.target else {
            for letter in &letters {
                tracing::error!(shard = why.shard, "gave up on a record and SKIPPED it (no --on-failure target): {}", String::from_utf8_lossy(&letter.json()));
            }
            self.skipped.fetch_add(letters.len() as u64, Ordering::Relaxed);
            return Ok(());
        };
        let bodies: Vec<Vec<u8>> = letters.into_iter().map(|letter| self.fitted(target, letter)).collect();
        let out: Vec<OutRecord<'_>> = records
            .iter()
            .zip(&bodies)
            .map(|(record, body)| OutRecord { data: body, partition_key: record.partition_key, explicit_hash_key: None })
            .collect();
        target.write_now(ON_FAILURE, &out).await?;
        self.written.fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The envelope as JSON, without its data when it would not fit the
    /// target (the data then goes to the log).
    fn fitted(&self, target: &Outputs, mut letter: DeadLetter<'_>) -> Vec<u8> {
        let body = letter.json();
        let check = |body: &[u8]| target.check(ON_FAILURE, &OutRecord { data: body, partition_key: letter.partition_key, explicit_hash_key: None });
        match check(&body) {
            Ok(()) => body,
            Err(reason) => {
                tracing::error!(
                    shard = letter.shard,
                    sequence_number = letter.sequence_number,
                    "a record given up on is too large for --on-failure with its data ({reason}); its envelope goes without it, and its data is here: {}",
                    letter.data.as_deref().unwrap_or_default()
                );
                letter.data = None;
                letter.data_omitted = Some(reason);
                letter.json()
            }
        }
    }

    /// Records written to the failure target so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Records given up on and skipped (no target) so far.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_carries_the_record_and_why() {
        let record = Record {
            data: &[0xff, 1],
            partition_key: "k",
            sequence_number: "49",
            sub_sequence_number: Some(2),
            arrival_timestamp_ms: 1_769_860_800_000,
            explicit_hash_key: None,
        };
        let why = GiveUp { stream: "orders", shard: "shardId-1", condition: Condition::RetryAttemptsExhausted, attempts: 3, error: "processor trapped: boom", processor: "abc (p@1)" };
        let json: serde_json::Value = serde_json::from_slice(&DeadLetter::new(&record, &why).json()).unwrap();
        assert_eq!(json["stream"], "orders");
        assert_eq!(json["shard"], "shardId-1");
        assert_eq!(json["sequence_number"], "49");
        assert_eq!(json["sub_sequence_number"], 2);
        assert_eq!(json["partition_key"], "k");
        assert_eq!(json["arrival"], "2026-01-31T12:00:00Z");
        assert_eq!(json["data"], "/wE=");
        assert_eq!(json["condition"], "RetryAttemptsExhausted");
        assert_eq!(json["attempts"], 3);
        assert_eq!(json["error"], "processor trapped: boom");
        assert_eq!(json["processor"], "abc (p@1)");
        assert!(json.get("explicit_hash_key").is_none() && json.get("data_omitted").is_none());
    }
}
