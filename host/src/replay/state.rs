//! State in a replay: a map in memory, changed by each checkpoint as the
//! state table is in `kcl-host run`, and optionally loaded from and saved
//! to a JSON file (`--state FILE`), so a processor's state logic is tested
//! without AWS.
//!
//! The file is one JSON object, key → value: a string for a UTF-8 value,
//! `{"data_base64": "..."}` for any other.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::runtime::{StateChanges, StateFuture, StateSource};

/// Committed state, key → value.
#[derive(Debug, Default)]
pub struct MemoryState {
    values: Mutex<BTreeMap<String, Vec<u8>>>,
}

/// A value as the file holds it.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum FileValue {
    Text(String),
    Binary { data_base64: String },
}

impl MemoryState {
    /// The state saved in `path`; empty when the file does not exist yet.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(format!("cannot read the state file `{}`: {e}", path.display())),
        };
        let file: BTreeMap<String, FileValue> = serde_json::from_str(&text).map_err(|e| {
            format!("the state file `{}` is not a JSON object of key → value (a string, or {{\"data_base64\": ...}}): {e}", path.display())
        })?;
        let mut values = BTreeMap::new();
        for (key, value) in file {
            let bytes = match value {
                FileValue::Text(text) => text.into_bytes(),
                FileValue::Binary { data_base64 } => base64::engine::general_purpose::STANDARD
                    .decode(data_base64.trim())
                    .map_err(|e| format!("the state file `{}`: the value of `{key}` is not base64: {e}", path.display()))?,
            };
            values.insert(key, bytes);
        }
        Ok(Self { values: Mutex::new(values) })
    }

    /// Writes the state to `path`.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(&self.file_values()).expect("keys and values serialize");
        std::fs::write(path, text + "\n").map_err(|e| format!("cannot write the state file `{}`: {e}", path.display()))
    }

    /// Each key's value as the file holds it.
    pub(super) fn file_values(&self) -> BTreeMap<String, serde_json::Value> {
        let values = self.values.lock().expect("not poisoned");
        let file_value = |value: &[u8]| match std::str::from_utf8(value) {
            Ok(text) => FileValue::Text(text.to_owned()),
            Err(_) => FileValue::Binary { data_base64: base64::engine::general_purpose::STANDARD.encode(value) },
        };
        values.iter().map(|(key, value)| (key.clone(), serde_json::to_value(file_value(value)).expect("a value serializes"))).collect()
    }

    /// Applies a checkpoint's changes.
    pub fn commit(&self, changes: &StateChanges) {
        let mut values = self.values.lock().expect("not poisoned");
        for (key, value) in changes {
            match value {
                Some(value) => values.insert(key.clone(), value.clone()),
                None => values.remove(key),
            };
        }
    }

    /// How many keys have a value.
    pub fn len(&self) -> usize {
        self.values.lock().expect("not poisoned").len()
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StateSource for MemoryState {
    fn read<'a>(&'a self, keys: &'a [String]) -> StateFuture<'a, Result<Vec<Option<Vec<u8>>>, String>> {
        let values = self.values.lock().expect("not poisoned");
        let read = keys.iter().map(|key| values.get(key).cloned()).collect();
        Box::pin(std::future::ready(Ok(read)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_state_loads_back_text_and_binary_values() {
        let dir = std::env::temp_dir().join(format!("kcl-host-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        assert!(MemoryState::load(&path).unwrap().is_empty(), "a missing file is an empty state");
        let state = MemoryState::default();
        state.commit(&StateChanges::from([("alice".into(), Some(b"12".to_vec())), ("raw".into(), Some(vec![0xff, 0]))]));
        state.commit(&StateChanges::from([("gone".into(), None)]));
        state.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"alice\": \"12\"") && text.contains("data_base64"), "{text}");
        let loaded = MemoryState::load(&path).unwrap();
        assert_eq!(loaded.values.into_inner().unwrap(), BTreeMap::from([("alice".into(), b"12".to_vec()), ("raw".into(), vec![0xff, 0])]));
        std::fs::write(&path, "[1, 2]").unwrap();
        assert!(MemoryState::load(&path).unwrap_err().contains("not a JSON object"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
