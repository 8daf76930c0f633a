//! An HTTP target: each flush POSTs the records as JSON lines
//! (`application/x-ndjson`, see [`json_lines`]), at most 500 per request.
//! 5xx, 429 and connection errors are retried with a backoff; any other
//! status fails the flush, naming it.

use super::record::{json_lines, OutRecord};
use super::target::{retrying, Attempt, Retries, Target, WriteFuture, ATTEMPT_TIMEOUT};

/// Most records one request carries.
const MAX_RECORDS: usize = 500;

/// POSTs to one URL.
pub struct HttpTarget {
    client: reqwest::Client,
    url: String,
}

impl HttpTarget {
    /// Writes to `url`.
    pub fn new(url: String) -> Self {
        let client = reqwest::Client::builder().timeout(ATTEMPT_TIMEOUT).build().expect("a default HTTP client builds");
        Self { client, url }
    }

    async fn post(&self, body: &[u8]) -> Attempt<()> {
        let request = self.client.post(&self.url).header("content-type", "application/x-ndjson").body(body.to_vec());
        match request.send().await {
            Ok(response) if response.status().is_success() => Attempt::Done(()),
            Ok(response) if response.status().is_server_error() || response.status().as_u16() == 429 => {
                Attempt::Again(format!("answered {}", response.status()))
            }
            Ok(response) => Attempt::Fail(format!("answered {}; only 2xx is taken as written", response.status())),
            Err(e) => Attempt::Again(format!("{e}")),
        }
    }
}

impl Target for HttpTarget {
    fn check(&self, _: &OutRecord<'_>) -> Result<(), String> {
        Ok(())
    }

    fn write<'a>(&'a self, records: &'a [OutRecord<'a>], retries: &'a Retries) -> WriteFuture<'a> {
        Box::pin(async move {
            for chunk in records.chunks(MAX_RECORDS) {
                let body = json_lines(chunk);
                retrying(&self.url, retries, || self.post(&body)).await?;
            }
            Ok(())
        })
    }
}
