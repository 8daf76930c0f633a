//! The small HTTP/1 server the admin listener and the dashboard share:
//! an accept loop and plain answers.

use std::convert::Infallible;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Serves HTTP/1 on `listener` until aborted, each request answered by
/// `answer` (given the peer's address).
pub async fn serve_http<A, F>(listener: TcpListener, answer: A)
where
    A: Fn(Request<hyper::body::Incoming>, std::net::SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        let answer = answer.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = answer(request, peer);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// A response of `status` with `body` as `content_type`.
pub fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder().status(status).header("content-type", content_type).body(Full::new(Bytes::from(body))).expect("a valid response")
}
