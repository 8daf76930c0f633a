//! The admin listener (`--admin-listen`, off by default): Prometheus text at
//! `GET /metrics`, `GET /healthz` for orchestrators, the application's
//! dashboard at `GET /` ([`crate::dashboard`]), and `POST /swap` (a
//! new processor: its path as the body, or the component itself, known by
//! its bytes), which only a client on the same host may call.
//! Give it a loopback address unless something outside the host must scrape it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::clock;
use crate::http::{reply, serve_http};
use crate::dashboard::Dashboard;
use crate::lease::coordinator::Liveness;
use crate::metrics::Metrics;
use crate::swap::Swapper;

/// Largest component `POST /swap` accepts as its body.
const MAX_COMPONENT_BYTES: usize = 256 << 20;
/// Longest path `POST /swap` accepts (Linux's `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;
/// The most of a refused body an answer quotes.
const QUOTED_BYTES: usize = 80;
/// How every WebAssembly binary, components included, begins.
const WASM_MAGIC: &[u8] = b"\0asm";

/// What `/healthz` judges: the worker's heartbeat (so its leases are
/// valid), its main loop (so it takes, syncs and restarts shards), and
/// whether it holds its share of the leases.
pub struct Health {
    liveness: Arc<Liveness>,
    /// Milliseconds since the Unix epoch when the main loop last went round.
    loop_seen_ms: AtomicU64,
    /// Longest the main loop may stay away, or the worker stay short of its
    /// share, before it is unhealthy (the failover time).
    loop_limit: Duration,
    /// Milliseconds since the Unix epoch since when the worker has been
    /// short of its share; 0 while it holds it.
    short_since_ms: AtomicU64,
}

impl Health {
    /// A health view of `liveness`; the loop is stuck once it has not run for `loop_limit`.
    pub fn new(liveness: Arc<Liveness>, loop_limit: Duration) -> Self {
        Self { liveness, loop_seen_ms: AtomicU64::new(clock::unix_ms()), loop_limit, short_since_ms: AtomicU64::new(0) }
    }

    /// The last take pass found this worker short of its share (or could
    /// not take while its heartbeat was overdue), or not.
    pub fn short_of_share(&self, short: bool) {
        if short {
            // Since the first pass that found it short.
            let _ = self.short_since_ms.compare_exchange(0, clock::unix_ms(), Ordering::Relaxed, Ordering::Relaxed);
        } else {
            self.short_since_ms.store(0, Ordering::Relaxed);
        }
    }

    /// The main loop went round.
    pub fn loop_ran(&self) {
        self.loop_seen_ms.store(clock::unix_ms(), Ordering::Relaxed);
    }

    /// `Err` says what is wrong.
    fn check(&self) -> Result<(), String> {
        if !self.liveness.is_valid(tokio::time::Instant::now()) {
            return Err("the heartbeat is overdue: this worker's leases are not valid".into());
        }
        let idle = clock::unix_ms().saturating_sub(self.loop_seen_ms.load(Ordering::Relaxed));
        if idle > self.loop_limit.as_millis() as u64 {
            return Err(format!("the worker loop has not run for {idle} ms"));
        }
        let short_since = self.short_since_ms.load(Ordering::Relaxed);
        let short = if short_since == 0 { 0 } else { clock::unix_ms().saturating_sub(short_since) };
        if short > self.loop_limit.as_millis() as u64 {
            return Err(format!("this worker has been short of its share of the leases for {short} ms"));
        }
        Ok(())
    }
}

/// Starts the admin listener on `address`, when one is set; says where,
/// and warns when it is reachable from other machines.
pub async fn start(
    address: Option<std::net::SocketAddr>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    swapper: Arc<Swapper>,
    dashboard: Option<Arc<Dashboard>>,
) -> Result<Option<tokio::task::JoinHandle<()>>, String> {
    let Some(address) = address else { return Ok(None) };
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on --admin-listen {address}: {e}; choose a free address and port"))?;
    if !address.ip().is_loopback() {
        tracing::warn!("the admin listener is on {address}, not a loopback address: anyone who can reach it can read /metrics");
    }
    tracing::info!("admin listener on http://{address} (GET /metrics, GET /healthz, POST /swap; the dashboard at /)");
    Ok(Some(tokio::spawn(tracing::Instrument::in_current_span(serve(listener, metrics, health, swapper, dashboard)))))
}

/// Answers `GET /metrics`, `GET /healthz`, `POST /swap` and (with a
/// dashboard) the dashboard's page on `listener` until aborted.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, health: Arc<Health>, swapper: Arc<Swapper>, dashboard: Option<Arc<Dashboard>>) {
    serve_http(listener, move |request, peer| {
        let (metrics, health, swapper, dashboard) = (metrics.clone(), health.clone(), swapper.clone(), dashboard.clone());
        async move {
            if (request.method(), request.uri().path()) == (&Method::POST, "/swap") {
                return swap(request, peer.ip().is_loopback(), &swapper).await;
            }
            if let Some(page) = match &dashboard {
                Some(dashboard) => dashboard.respond(request.method(), request.uri().path()).await,
                None => None,
            } {
                return page;
            }
            respond(&request, &metrics, &health)
        }
    })
    .await
}

/// `POST /swap`: the body is the component (sent as `application/wasm`, or
/// recognised by its bytes whatever its `content-type`) or a path on this host; `200` once it is
/// offered to the shards, `422` with the reason when it is refused, `413`
/// with the cap for a body over it — answered from `content-length` before
/// any of the body is read, so the client hears it instead of a closed
/// connection.
async fn swap(request: Request<hyper::body::Incoming>, from_loopback: bool, swapper: &Swapper) -> Response<Full<Bytes>> {
    if !from_loopback {
        return reply(StatusCode::FORBIDDEN, "text/plain", "POST /swap is only accepted from this host\n".into());
    }
    let declared_wasm = request.headers().get("content-type").is_some_and(|t| t.as_bytes().starts_with(b"application/wasm"));
    let too_large = || {
        let cap = format!("the body is over the {} MiB a component may be; build a smaller one, or send its path instead\n", MAX_COMPONENT_BYTES >> 20);
        reply(StatusCode::PAYLOAD_TOO_LARGE, "text/plain", cap)
    };
    let declared_length = request.headers().get("content-length").and_then(|n| n.to_str().ok()?.parse::<u64>().ok());
    if declared_length.is_some_and(|n| n > MAX_COMPONENT_BYTES as u64) {
        return too_large();
    }
    let body = match Limited::new(request.into_body(), MAX_COMPONENT_BYTES).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, "text/plain", format!("cannot read the body: {e}\n")),
    };
    let result = match swap_body(&body, declared_wasm) {
        Ok(SwapBody::Component) => swapper.offer_bytes(&body, "POST /swap").await,
        Ok(SwapBody::Path(path)) => swapper.offer_path(std::path::Path::new(path), "POST /swap").await,
        Err(refusal) => Err(refusal),
    };
    match result {
        Ok(message) => reply(StatusCode::OK, "text/plain", format!("{message}\n")),
        Err(message) => reply(StatusCode::UNPROCESSABLE_ENTITY, "text/plain", format!("{message}\n")),
    }
}

/// What a `POST /swap` body holds.
#[derive(Debug, PartialEq)]
enum SwapBody<'a> {
    Component,
    Path(&'a str),
}

/// Tells a component (`declared_wasm`, or by its bytes) from a path; `Err`
/// quotes at most [`QUOTED_BYTES`] of a body that is neither.
fn swap_body(body: &[u8], declared_wasm: bool) -> Result<SwapBody<'_>, String> {
    if declared_wasm || body.starts_with(WASM_MAGIC) {
        return Ok(SwapBody::Component);
    }
    let quoted = || {
        let head = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BYTES)]).escape_debug().to_string();
        let more = if body.len() > QUOTED_BYTES { format!("… ({} bytes)", body.len()) } else { String::new() };
        format!("`{head}`{more}")
    };
    let neither = |why: &str| Err(format!("the body is neither a component (it does not start with \\0asm) nor a path ({why}): {}", quoted()));
    let Ok(text) = std::str::from_utf8(body) else { return neither("it is not UTF-8") };
    let path = text.trim();
    if path.is_empty() {
        return neither("it is empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return neither(&format!("it is longer than {MAX_PATH_BYTES} bytes"));
    }
    if path.contains(['\0', '\n']) {
        return neither("it holds a NUL or a line break");
    }
    Ok(SwapBody::Path(path))
}

fn respond<B>(request: &Request<B>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => reply(StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", metrics.encode()),
        (&Method::GET, "/healthz") => match health.check() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(reason) => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{reason}\n")),
        },
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "GET /, GET /metrics, GET /healthz or POST /swap\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_body_is_a_component_by_its_bytes_or_a_short_path() {
        assert_eq!(swap_body(b"\0asm\x0d\0\x01\0rest", false), Ok(SwapBody::Component));
        assert_eq!(swap_body(b"text", true), Ok(SwapBody::Component), "declared: its load check says what is wrong");
        assert_eq!(swap_body(b" /srv/v2.wasm\n", false), Ok(SwapBody::Path("/srv/v2.wasm")));
        for body in [vec![0xffu8; 10], b"a\0b".to_vec(), vec![b'a'; 5000], b"  ".to_vec(), b"/a\n/b".to_vec()] {
            let refusal = swap_body(&body, false).unwrap_err();
            assert!(refusal.len() < 300, "the refusal quotes a little of the body, not all of it: {refusal}");
            assert!(refusal.starts_with("the body is neither a component"), "{refusal}");
        }
    }
}
