//! State per key, kept across batches, restarts, handoffs, swaps and
//! reshards, and committed with the checkpoint: the changes made while
//! processing the records up to a checkpoint are written in the same atomic
//! write as that checkpoint. After a crash the state is exactly the effect
//! of the records up to the last checkpoint, and the records after it come
//! again — so each record changes the state once.
//!
//! A key belongs to the shard its records go to: use the record's
//! partition key (a key whose MD5 hash falls outside the shard's hash-key
//! range is refused with [`StateError::NotThisShard`]).
//!
//! ```no_run
//! # fn f(record: kcl_guest::Record<'_>, amount: i64) -> Result<(), kcl_guest::state::StateError> {
//! // Sum an amount per user; the total is committed with the next checkpoint.
//! let total = kcl_guest::state::get_i64(record.partition_key)?.unwrap_or(0);
//! kcl_guest::state::set_i64(record.partition_key, total + amount)?;
//! # Ok(()) }
//! ```
//!
//! Changes are kept in the instance until the next checkpoint (up to
//! 64 MiB of them); a value holds up to 390,000 bytes, a key up to 1,024.
//! Any number of keys may change between two checkpoints: more than one
//! DynamoDB transaction holds are committed through a log, still at once. A call that fails (retryable, fatal, a panic) drops the changes
//! it made since the last checkpoint, as the batch comes again. A
//! [`StateError`] passed on with `?` fails the call as fatal: a fresh
//! instance starts from the last checkpoint.

use std::fmt;

use crate::bindings::kcl::processor::state as wit;

/// Why a state call did nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateError {
    /// The key does not belong to this shard; the message names its range.
    NotThisShard(String),
    /// The key or value is too large, or too many keys changed since the
    /// last checkpoint: checkpoint more often.
    TooLarge(String),
    /// The state could not be read now; try again later.
    Unavailable(String),
    /// A value is not what a typed getter reads (say, not a decimal integer).
    Malformed(String),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::NotThisShard(m) | StateError::TooLarge(m) | StateError::Unavailable(m) | StateError::Malformed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StateError {}

impl From<wit::StateError> for StateError {
    fn from(e: wit::StateError) -> Self {
        match e {
            wit::StateError::NotThisShard(m) => StateError::NotThisShard(m),
            wit::StateError::TooLarge(m) => StateError::TooLarge(m),
            wit::StateError::Unavailable(m) => StateError::Unavailable(m),
        }
    }
}

/// The value of `key`, or `None` when it has none.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, StateError> {
    wit::get(key).map_err(Into::into)
}

/// The values of `keys`, in order, in one crossing (and one read of the
/// keys this instance has not read yet).
pub fn get_many(keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    wit::get_many(&keys).map_err(Into::into)
}

/// Sets `key` to `value`, committed with the next checkpoint.
pub fn set(key: &str, value: &[u8]) -> Result<(), StateError> {
    wit::set(key, value).map_err(Into::into)
}

/// Removes `key`'s value, committed with the next checkpoint.
pub fn delete(key: &str) -> Result<(), StateError> {
    wit::delete(key).map_err(Into::into)
}

/// `key`'s value as text.
pub fn get_str(key: &str) -> Result<Option<String>, StateError> {
    get(key)?
        .map(|bytes| String::from_utf8(bytes).map_err(|_| StateError::Malformed(format!("the value of `{key}` is not UTF-8 text"))))
        .transpose()
}

/// `key`'s value as an integer, kept as decimal text (readable in
/// `kcl-host replay --state` files and in the state table).
pub fn get_i64(key: &str) -> Result<Option<i64>, StateError> {
    get(key)?.map(|bytes| parse_i64(key, bytes)).transpose()
}

/// The values of `keys` as integers, in order, in one crossing.
pub fn get_many_i64(keys: &[&str]) -> Result<Vec<Option<i64>>, StateError> {
    keys.iter().zip(get_many(keys)?).map(|(key, value)| value.map(|bytes| parse_i64(key, bytes)).transpose()).collect()
}

fn parse_i64(key: &str, bytes: Vec<u8>) -> Result<i64, StateError> {
    let text = String::from_utf8(bytes).map_err(|_| StateError::Malformed(format!("the value of `{key}` is not UTF-8 text")))?;
    text.parse().map_err(|_| StateError::Malformed(format!("the value of `{key}` is {text:?}, not a decimal integer")))
}

/// Sets `key` to the integer `value`, as decimal text.
pub fn set_i64(key: &str, value: i64) -> Result<(), StateError> {
    set(key, value.to_string().as_bytes())
}

/// `key`'s value parsed as JSON (feature `json`).
#[cfg(feature = "json")]
pub fn get_json<T: serde::de::DeserializeOwned>(key: &str) -> Result<Option<T>, StateError> {
    get(key)?
        .map(|bytes| serde_json::from_slice(&bytes).map_err(|e| StateError::Malformed(format!("the value of `{key}` is not JSON of that shape: {e}"))))
        .transpose()
}

/// Sets `key` to `value` as JSON (feature `json`).
#[cfg(feature = "json")]
pub fn set_json<T: serde::Serialize + ?Sized>(key: &str, value: &T) -> Result<(), StateError> {
    let bytes = serde_json::to_vec(value).map_err(|e| StateError::Malformed(format!("`{key}`: {e}")))?;
    set(key, &bytes)
}
