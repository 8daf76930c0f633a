//! `kcl-host dashboard`, and the same page at `/` of a worker's admin
//! listener: an application's shards, lineage, workers, rollout and
//! failures on one web page that updates itself.
//!
//! The page is HTML, CSS and a script built into the binary (no build
//! step). Its script polls `GET /status.json` — the report `status --json`
//! prints, read from the same tables — and draws it; throughput and how
//! long a checkpoint has stood are worked out in the page from successive
//! reports. Every path answers GET alone: the dashboard changes nothing.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::http::{reply, serve_http};
use crate::aws::AwsClients;
use crate::cli::DashboardArgs;
use crate::status;

/// The page, its style and its script.
const PAGE: &str = include_str!("page.html");
const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// How long one reading of the tables answers every page that asks: pages
/// open side by side cost one read, not one each.
const FRESH: Duration = Duration::from_secs(1);

/// What the page shows, and the last reading of it.
pub struct Dashboard {
    clients: AwsClients,
    application: String,
    /// A heartbeat older than this counts as stopped.
    failover: Duration,
    /// Whether to read each shard's state size (a Scan of the state table).
    state: bool,
    /// The last report as JSON, and when it was read.
    last: Mutex<Option<(Instant, Bytes)>>,
}

impl Dashboard {
    /// The dashboard of `application`; with `state`, each reading scans the state table too.
    pub fn new(clients: AwsClients, application: &str, failover: Duration, state: bool) -> Self {
        Self { clients, application: application.to_owned(), failover, state, last: Mutex::new(None) }
    }

    /// The report as `status --json` gives it, read at most once per [`FRESH`].
    async fn report(&self) -> Result<Bytes, String> {
        let mut last = self.last.lock().await;
        if let Some((_, json)) = last.as_ref().filter(|(read_at, _)| read_at.elapsed() < FRESH) {
            return Ok(json.clone());
        }
        let mut report = status::read(&self.clients, &self.application, self.failover).await.map_err(|e| e.to_string())?;
        if self.state {
            status::add_state_sizes(&mut report, &self.clients).await.map_err(|e| e.to_string())?;
        }
        let json = Bytes::from(serde_json::to_vec(&report).expect("the report serializes"));
        *last = Some((Instant::now(), json.clone()));
        Ok(json)
    }

    /// The answer to `method` on `path` when the path is the dashboard's;
    /// `None` for any other path.
    pub async fn respond(&self, method: &Method, path: &str) -> Option<Response<Full<Bytes>>> {
        let page = |content_type: &str, body: &'static str| Response::builder().header("content-type", content_type).body(Full::new(Bytes::from_static(body.as_bytes())));
        if !matches!(path, "/" | "/dashboard.css" | "/dashboard.js" | "/status.json") {
            return None;
        }
        if method != Method::GET {
            let refusal = reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", format!("{path} answers GET only: the dashboard changes nothing\n"));
            return Some(with_headers(refusal));
        }
        let response = match path {
            "/" => page("text/html; charset=utf-8", PAGE).expect("a valid response"),
            "/dashboard.css" => page("text/css; charset=utf-8", STYLE).expect("a valid response"),
            "/dashboard.js" => page("text/javascript; charset=utf-8", SCRIPT).expect("a valid response"),
            _ => match self.report().await {
                Ok(json) => Response::builder().header("content-type", "application/json").body(Full::new(json)).expect("a valid response"),
                Err(e) => reply(StatusCode::BAD_GATEWAY, "text/plain", format!("cannot read the tables of {}: {e}\n", self.application)),
            },
        };
        Some(with_headers(response))
    }
}

/// Headers every answer carries: nothing cached, the page's own files the
/// only script and style it runs, and no framing by other sites.
fn with_headers(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    let headers = response.headers_mut();
    headers.insert("cache-control", "no-store".parse().expect("a valid header"));
    headers.insert("x-content-type-options", "nosniff".parse().expect("a valid header"));
    headers.insert("content-security-policy", "default-src 'self'; frame-ancestors 'none'".parse().expect("a valid header"));
    response
}

/// `kcl-host dashboard`: serves the page until interrupted.
pub async fn command(args: DashboardArgs) -> Result<(), String> {
    let clients = AwsClients::from_env(&args.aws.settings()).await.map_err(|e| e.to_string())?;
    let failover = status::failover_time(args.failover_time.as_deref())?;
    let dashboard = Arc::new(Dashboard::new(clients, &args.application, failover, args.state));
    // Said before serving: a first reading that fails tells the operator now, not in the page.
    status::read(&dashboard.clients, &args.application, failover).await.map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on --listen {}: {e}; choose a free address and port", args.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    if !address.ip().is_loopback() {
        tracing::warn!("the dashboard is on {address}, not a loopback address: anyone who can reach it can read the application's tables through it");
    }
    tracing::info!(application = %args.application, "dashboard on http://{address}/");
    serve_http(listener, move |request, _peer| {
        let dashboard = dashboard.clone();
        async move {
            match dashboard.respond(request.method(), request.uri().path()).await {
                Some(response) => response,
                None => with_headers(reply(StatusCode::NOT_FOUND, "text/plain", "the dashboard is at /\n".into())),
            }
        }
    })
    .await;
    Ok(())
}
