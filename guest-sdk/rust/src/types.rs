//! The Rust view of what the host hands a processor.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bindings::kcl::processor::types as wit;

/// One Kinesis record, borrowed from its [`Batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The payload as the producer wrote it.
    pub data: &'a [u8],
    /// The key the producer chose; it picked the shard.
    pub partition_key: &'a str,
    /// Where the record is in the shard; checkpoints name it.
    pub sequence_number: &'a str,
    /// Set for a user record de-aggregated from a KPL aggregate record.
    pub sub_sequence_number: Option<u64>,
    /// When Kinesis accepted the record.
    pub approximate_arrival: SystemTime,
    /// The hash key the producer gave instead of hashing the partition key.
    pub explicit_hash_key: Option<&'a str>,
}

/// Records in shard order. The host hands them over as a few flat buffers;
/// a [`Record`] is a view into them, so reading a batch allocates nothing.
#[derive(Clone, Debug)]
pub struct Batch {
    columns: wit::Batch,
}

/// `column[ends[i-1]..ends[i]]`.
fn cut<'a, T: ?Sized + std::ops::Index<std::ops::Range<usize>, Output = T>>(column: &'a T, ends: &[u32], i: usize) -> &'a T {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &column[start..ends[i] as usize]
}

impl Batch {
    /// How many records.
    pub fn len(&self) -> usize {
        self.columns.data_ends.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How far this batch is behind the tip of the shard.
    pub fn millis_behind_latest(&self) -> u64 {
        self.columns.millis_behind_latest
    }

    /// Record `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<Record<'_>> {
        let c = &self.columns;
        let flags = wit::RecordFlags::from_bits_retain(*c.flags.get(index)?);
        Some(Record {
            data: cut(c.data.as_slice(), &c.data_ends, index),
            partition_key: cut(c.partition_keys.as_str(), &c.partition_key_ends, index),
            sequence_number: cut(c.sequence_numbers.as_str(), &c.sequence_number_ends, index),
            sub_sequence_number: flags.contains(wit::RecordFlags::AGGREGATED).then(|| c.sub_sequence_numbers[index]),
            approximate_arrival: UNIX_EPOCH + Duration::from_millis(c.arrival_timestamps_ms[index]),
            explicit_hash_key: flags
                .contains(wit::RecordFlags::EXPLICIT_HASH_KEY)
                .then(|| cut(c.explicit_hash_keys.as_str(), &c.explicit_hash_key_ends, index)),
        })
    }

    /// The records in order.
    pub fn iter(&self) -> Records<'_> {
        Records { batch: self, next: 0 }
    }

    /// The last record, if any.
    pub fn last(&self) -> Option<Record<'_>> {
        self.get(self.len().checked_sub(1)?)
    }
}

/// The records of a [`Batch`], in order.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    batch: &'a Batch,
    next: usize,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        let record = self.batch.get(self.next)?;
        self.next += 1;
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.batch.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Records<'_> {}

impl<'a> IntoIterator for &'a Batch {
    type Item = Record<'a>;
    type IntoIter = Records<'a>;

    fn into_iter(self) -> Records<'a> {
        self.iter()
    }
}

/// The shard a processor serves and where delivery starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// The Kinesis stream.
    pub stream_name: String,
    /// The shard this instance serves.
    pub shard_id: String,
    /// The last checkpointed sequence number, or `TRIM_HORIZON` / `LATEST` /
    /// `AT_TIMESTAMP` for a shard never checkpointed.
    pub starting_checkpoint: String,
    /// Set when the checkpoint is inside a KPL aggregate: the user record's position in it.
    pub starting_sub_sequence_number: Option<u64>,
}

/// Why a processor is being shut down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownReason {
    /// Every record of the shard was delivered; the host writes `SHARD_END`
    /// once `shutdown` returns `Ok`.
    ShardEnd,
    /// Another worker holds the lease now; checkpoints are refused.
    LeaseLost,
    /// The worker is stopping or swapping the processor; checkpoints still work.
    Requested,
}

/// How a processor call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessorError {
    /// Transient: the host delivers the same batch again after a backoff.
    Retryable(String),
    /// The host drops this instance and starts a fresh one from the last
    /// checkpoint, after a backoff.
    Fatal(String),
    /// The batch failed at record `index`: the records before it are done
    /// (the host checkpoints them) and the batch comes again from `index`.
    FailedAt {
        /// The failed record's index in the batch.
        index: u32,
        /// Why it failed.
        reason: String,
    },
}

impl ProcessorError {
    /// A transient failure: deliver the same batch again.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::Retryable(message.into())
    }

    /// A failure this instance cannot recover from.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::Fatal(message.into())
    }

    /// A partial failure: record `index` of the batch failed, the ones
    /// before it are done.
    pub fn failed_at(index: usize, reason: impl Into<String>) -> Self {
        Self::FailedAt { index: u32::try_from(index).unwrap_or(u32::MAX), reason: reason.into() }
    }
}

impl fmt::Display for ProcessorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Retryable(m) => write!(f, "retryable: {m}"),
            Self::Fatal(m) => write!(f, "fatal: {m}"),
            Self::FailedAt { index, reason } => write!(f, "failed at record {index}: {reason}"),
        }
    }
}

/// Any error turned into a [`ProcessorError`] with `?` is fatal.
impl<E: std::error::Error> From<E> for ProcessorError {
    fn from(error: E) -> Self {
        Self::Fatal(error.to_string())
    }
}

impl From<wit::Batch> for Batch {
    fn from(columns: wit::Batch) -> Self {
        Self { columns }
    }
}

impl From<wit::ShardInfo> for ShardInfo {
    fn from(s: wit::ShardInfo) -> Self {
        Self {
            stream_name: s.stream_name,
            shard_id: s.shard_id,
            starting_checkpoint: s.starting_checkpoint,
            starting_sub_sequence_number: s.starting_sub_sequence_number,
        }
    }
}

impl From<wit::ShutdownReason> for ShutdownReason {
    fn from(r: wit::ShutdownReason) -> Self {
        match r {
            wit::ShutdownReason::ShardEnd => Self::ShardEnd,
            wit::ShutdownReason::LeaseLost => Self::LeaseLost,
            wit::ShutdownReason::Requested => Self::Requested,
        }
    }
}

/// A tumbling window of arrival times (`kcl-host run --window 60s`),
/// closing for this shard: see [`RecordProcessor::close_window`](crate::RecordProcessor::close_window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The first millisecond in the window, since the Unix epoch.
    pub start_ms: u64,
    /// The first millisecond after it.
    pub end_ms: u64,
    /// Closed before its end because the shard ended (a split or a
    /// merge); its children go on with the rest of the window.
    pub shard_ended: bool,
}

impl From<crate::bindings::exports::kcl::processor::window::WindowBounds> for Window {
    fn from(w: crate::bindings::exports::kcl::processor::window::WindowBounds) -> Self {
        Window { start_ms: w.start_ms, end_ms: w.end_ms, shard_ended: w.shard_ended }
    }
}

impl From<ProcessorError> for wit::ProcessorError {
    fn from(e: ProcessorError) -> Self {
        match e {
            ProcessorError::Retryable(m) => Self::Retryable(m),
            ProcessorError::Fatal(m) => Self::Fatal(m),
            ProcessorError::FailedAt { index, reason } => Self::FailedAt(wit::RecordFailure { index, reason }),
        }
    }
}
