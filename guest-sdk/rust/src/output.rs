//! Send records on: to the targets the operator declared by name
//! (`kcl-host run --output enriched=kinesis:orders-enriched`).
//!
//! What a processor sends while handling a record is written before any
//! checkpoint that covers the record, so a checkpoint never runs ahead of
//! its outputs; a crash delivers the records again, and they are sent again
//! (at least once, never lost).
//!
//! ```no_run
//! # fn f() -> Result<(), kcl_guest::output::OutputError> {
//! // One record:
//! kcl_guest::output::send("enriched", "customer-42", br#"{"total": 12}"#)?;
//! // Many, in one crossing:
//! let mut outputs = kcl_guest::output::Outputs::new();
//! outputs.push("customer-42", b"first").push("customer-7", b"second");
//! outputs.send("enriched")?;
//! # Ok(()) }
//! ```

use std::fmt;

use crate::bindings::kcl::processor::output as wit;

/// Why records were not taken; none of them was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputError {
    /// No target of that name was declared; the message names the ones that were.
    UnknownTarget(String),
    /// A record does not fit the target; the message says which and why.
    Invalid(String),
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputError::UnknownTarget(m) | OutputError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for OutputError {}

/// Records gathered to send together, kept as the columns the host takes.
#[derive(Clone, Debug)]
pub struct Outputs {
    columns: wit::Records,
}

impl Default for Outputs {
    fn default() -> Self {
        Self::new()
    }
}

impl Outputs {
    /// None yet.
    pub fn new() -> Self {
        Outputs {
            columns: wit::Records {
                data: Vec::new(),
                data_ends: Vec::new(),
                partition_keys: String::new(),
                partition_key_ends: Vec::new(),
                explicit_hash_keys: String::new(),
                explicit_hash_key_ends: Vec::new(),
            },
        }
    }

    /// Adds a record placed by its partition key.
    pub fn push(&mut self, partition_key: &str, data: &[u8]) -> &mut Self {
        self.push_with_hash_key(partition_key, None, data)
    }

    /// Adds a record, placed by `explicit_hash_key` when there is one.
    pub fn push_with_hash_key(&mut self, partition_key: &str, explicit_hash_key: Option<&str>, data: &[u8]) -> &mut Self {
        let c = &mut self.columns;
        c.data.extend_from_slice(data);
        c.data_ends.push(c.data.len() as u32);
        c.partition_keys.push_str(partition_key);
        c.partition_key_ends.push(c.partition_keys.len() as u32);
        c.explicit_hash_keys.push_str(explicit_hash_key.unwrap_or_default());
        c.explicit_hash_key_ends.push(c.explicit_hash_keys.len() as u32);
        self
    }

    /// How many records are gathered.
    pub fn len(&self) -> usize {
        self.columns.data_ends.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends every gathered record to `target`, in order, and starts over.
    pub fn send(&mut self, target: &str) -> Result<(), OutputError> {
        let columns = std::mem::take(self).columns;
        wit::send(target, &columns).map_err(|e| match e {
            wit::SendError::UnknownTarget(m) => OutputError::UnknownTarget(m),
            wit::SendError::Invalid(m) => OutputError::Invalid(m),
        })
    }
}

/// Sends one record to `target`.
pub fn send(target: &str, partition_key: &str, data: &[u8]) -> Result<(), OutputError> {
    Outputs::new().push(partition_key, data).send(target)
}
