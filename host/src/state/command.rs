//! `kcl-host state get|dump`: what an application's checkpoints committed,
//! for operators. Reads only; a missing table is an error, never created.

use base64::Engine as _;

use super::table::{StateItem, StateTable};
use crate::aws::{AwsClients, AwsSettings};

/// What `kcl-host state` reads.
pub enum StateRead {
    /// One key's value.
    Get {
        /// The key's stream.
        stream: String,
        /// The key.
        key: String,
    },
    /// Every key, of one stream when given; as JSON lines with `json`.
    Dump {
        /// Only this stream's keys.
        stream: Option<String>,
        /// One JSON object per line.
        json: bool,
    },
}

/// Runs `kcl-host state` on `application`'s table, printing to stdout.
pub async fn command(settings: &AwsSettings, application: &str, read: StateRead) -> Result<(), String> {
    let clients = AwsClients::from_env(settings).await.map_err(|e| e.to_string())?;
    let table = StateTable::new(clients.dynamodb.clone(), application);
    table.check().await.map_err(|e| e.to_string())?;
    match read {
        StateRead::Get { stream, key } => {
            let value = table.read_existing(&stream, std::slice::from_ref(&key)).await.map_err(|e| e.to_string())?.remove(0);
            match value {
                Some(value) => println!("{}", shown(&value)),
                None => return Err(format!("`{key}` has no value in stream `{stream}` of {}", table.name())),
            }
        }
        StateRead::Dump { stream, json } => {
            for item in table.scan(stream.as_deref()).await.map_err(|e| e.to_string())? {
                println!("{}", line(&item, json));
            }
        }
    }
    Ok(())
}

/// A value as text when it is UTF-8, else as `base64:...`.
fn shown(value: &[u8]) -> String {
    match std::str::from_utf8(value) {
        Ok(text) => text.to_owned(),
        Err(_) => format!("base64:{}", base64::engine::general_purpose::STANDARD.encode(value)),
    }
}

/// One item: `stream key = value (shard, checkpoint)`, or a JSON object.
fn line(item: &StateItem, json: bool) -> String {
    if json {
        serde_json::json!({ "stream": item.stream, "key": item.key, "value": shown(&item.value), "shard": item.shard, "checkpoint": item.checkpoint }).to_string()
    } else {
        format!("{} {} = {}  ({} at {})", item.stream, item.key, shown(&item.value), item.shard, item.checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_show_as_text_or_base64() {
        let item = StateItem { stream: "orders".into(), key: "ana".into(), value: b"1255".to_vec(), shard: "shardId-1".into(), checkpoint: "49".into() };
        assert_eq!(line(&item, false), "orders ana = 1255  (shardId-1 at 49)");
        assert_eq!(shown(&[0xff, 0]), "base64:/wA=");
        let json: serde_json::Value = serde_json::from_str(&line(&item, true)).unwrap();
        assert_eq!(json["value"], "1255");
    }
}
