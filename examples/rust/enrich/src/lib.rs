//! Enrich and forward: each JSON event with a `user` is looked up in an
//! HTTP API (`GET {api_url}/users/{user}`, the variable `api_url`), its
//! answer added as `profile`, and the enriched event forwarded to the output
//! `enriched` with the user as partition key; then the batch is checkpointed.
//!
//! ```sh
//! kcl-host run enrich.wasm --stream orders --application orders-enrich \
//!   --var api_url=https://users.example.com --allow-outbound https://users.example.com \
//!   --output enriched=kinesis:orders-enriched
//! ```
//!
//! Records that are not JSON objects with a `user` are skipped with a
//! warning. A failed lookup (the API down, or not allowed) fails the batch
//! as retryable: it comes again after a backoff, and nothing is forwarded or
//! checkpointed past it meanwhile.

use kcl_guest::output::Outputs;
use kcl_guest::{Batch, Checkpointer, ProcessorError, RecordProcessor, ShardInfo};
use serde_json::Value;

pub struct Enrich {
    api_url: String,
}

impl Enrich {
    /// The user's profile from the API.
    fn profile(&self, user: &str) -> Result<Value, ProcessorError> {
        let url = format!("{}/users/{user}", self.api_url.trim_end_matches('/'));
        let response = waki::Client::new()
            .get(&url)
            .connect_timeout(std::time::Duration::from_secs(2))
            .send()
            .map_err(|e| ProcessorError::retryable(format!("looking up {url}: {e}")))?;
        if response.status_code() != 200 {
            return Err(ProcessorError::retryable(format!("looking up {url}: status {}", response.status_code())));
        }
        let body = response.body().map_err(|e| ProcessorError::retryable(format!("reading {url}: {e}")))?;
        serde_json::from_slice(&body).map_err(|e| ProcessorError::retryable(format!("{url} answered something that is not JSON: {e}")))
    }
}

impl RecordProcessor for Enrich {
    fn initialize(_: ShardInfo) -> Result<Self, ProcessorError> {
        let api_url = kcl_guest::config::get("api_url").ok_or_else(|| ProcessorError::fatal("set the API's address with --var api_url=URL"))?;
        Ok(Enrich { api_url })
    }

    fn process_records(&mut self, batch: Batch, checkpointer: &Checkpointer) -> Result<(), ProcessorError> {
        let mut enriched = Outputs::new();
        for record in &batch {
            let mut event = match serde_json::from_slice::<Value>(record.data) {
                Ok(Value::Object(event)) if event.get("user").is_some_and(Value::is_string) => event,
                _ => {
                    kcl_guest::warn!("skipping record {}: not a JSON event with a user", record.sequence_number);
                    continue;
                }
            };
            let user = event["user"].as_str().unwrap_or_default().to_owned();
            event.insert("profile".into(), self.profile(&user)?);
            enriched.push(&user, Value::Object(event).to_string().as_bytes());
        }
        enriched.send("enriched").map_err(|e| ProcessorError::fatal(e.to_string()))?;
        checkpointer.checkpoint().map_err(|e| ProcessorError::retryable(e.to_string()))
    }
}

kcl_guest::export_processor!(Enrich);
