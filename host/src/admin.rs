//! The admin listener (`--admin-listen`, off by default): Prometheus text at
//! `GET /metrics` and `GET /healthz` for orchestrators. It serves nothing
//! else; give it a loopback address unless something outside the host must
//! scrape it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::lease::coordinator::Liveness;
use crate::metrics::Metrics;

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
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, health: Arc<Health>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (metrics, health) = (metrics.clone(), health.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = respond(&request, &metrics, &health);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn respond<B>(request: &Request<B>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder().status(status).header("content-type", content_type).body(Full::new(Bytes::from(body))).expect("a valid response")
    };
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => reply(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", metrics.encode()),
        (&Method::GET, "/healthz") => match health.check() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            Err(reason) => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{reason}\n")),
        },
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "GET /metrics or /healthz\n".into()),
    }
}
