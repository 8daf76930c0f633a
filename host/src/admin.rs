//! The admin listener (`--admin-listen`, off by default): Prometheus text at
//! `GET /metrics`, `GET /healthz` for orchestrators, and `POST /swap` (a
//! new processor: its path as the body, or the component itself as an
//! `application/wasm` body), which only a client on the same host may call.
//! Give it a loopback address unless something outside the host must scrape it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::lease::coordinator::Liveness;
use crate::metrics::Metrics;
use crate::swap::Swapper;

/// Largest component `POST /swap` accepts as its body.
const MAX_COMPONENT_BYTES: usize = 256 << 20;

/// What `/healthz` judges: the worker's heartbeat (so its leases are valid)
/// and its main loop (so it takes, syncs and restarts shards).
pub struct Health {
    liveness: Arc<Liveness>,
    /// Milliseconds since the Unix epoch when the main loop last went round.
    loop_seen_ms: AtomicU64,
    /// Longest the main loop may stay away before the worker is unhealthy.
    loop_limit: Duration,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

impl Health {
    pub fn new(liveness: Arc<Liveness>, loop_limit: Duration) -> Self {
        Self { liveness, loop_seen_ms: AtomicU64::new(now_ms()), loop_limit }
    }

    /// The main loop went round.
    pub fn loop_ran(&self) {
        self.loop_seen_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// `Err` says what is wrong.
    fn check(&self) -> Result<(), String> {
        if !self.liveness.is_valid(tokio::time::Instant::now()) {
            return Err("the heartbeat is overdue: this worker's leases are not valid".into());
        }
        let idle = now_ms().saturating_sub(self.loop_seen_ms.load(Ordering::Relaxed));
        if idle > self.loop_limit.as_millis() as u64 {
            return Err(format!("the worker loop has not run for {idle} ms"));
        }
        Ok(())
    }
}

/// Serves `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, health: Arc<Health>, swapper: Arc<Swapper>) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        let (metrics, health, swapper) = (metrics.clone(), health.clone(), swapper.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                let (metrics, health, swapper) = (metrics.clone(), health.clone(), swapper.clone());
                async move {
                    let response = if (request.method(), request.uri().path()) == (&Method::POST, "/swap") {
                        swap(request, peer.ip().is_loopback(), &swapper).await
                    } else {
                        respond(&request, &metrics, &health)
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder().status(status).header("content-type", content_type).body(Full::new(Bytes::from(body))).expect("a valid response")
}

/// `POST /swap`: the body is a path on this host, or (`application/wasm`)
/// the component; `200` once it is offered to the shards, `422` with the
/// reason when it is refused.
async fn swap(request: Request<hyper::body::Incoming>, from_loopback: bool, swapper: &Swapper) -> Response<Full<Bytes>> {
    if !from_loopback {
        return reply(StatusCode::FORBIDDEN, "text/plain", "POST /swap is only accepted from this host\n".into());
    }
    let is_wasm = request.headers().get("content-type").is_some_and(|t| t.as_bytes().starts_with(b"application/wasm"));
    let body = match Limited::new(request.into_body(), MAX_COMPONENT_BYTES).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return reply(StatusCode::PAYLOAD_TOO_LARGE, "text/plain", format!("cannot read the body: {e}\n")),
    };
    let result = if is_wasm {
        swapper.offer_bytes(&body, "POST /swap").await
    } else {
        let path = String::from_utf8_lossy(&body).trim().to_owned();
        swapper.offer_path(std::path::Path::new(&path), "POST /swap").await
    };
    match result {
        Ok(message) => reply(StatusCode::OK, "text/plain", format!("{message}\n")),
        Err(message) => reply(StatusCode::UNPROCESSABLE_ENTITY, "text/plain", format!("{message}\n")),
    }
}

fn respond<B>(request: &Request<B>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => reply(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", metrics.encode()),
        (&Method::GET, "/healthz") => match health.check() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(reason) => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{reason}\n")),
        },
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "GET /metrics, GET /healthz or POST /swap\n".into()),
    }
}
