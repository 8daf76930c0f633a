//! A local HTTP server for the output and outbound tests: it keeps the body
//! lines of every POST it accepts, answers every GET with a small JSON
//! object naming the path, and can be told to fail (503), to refuse (403)
//! or to go silent (read requests, never answer) — a target that is down,
//! forbidden or black-holed.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How the server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 200, and POST bodies are kept.
    Ok,
    /// 503 to everything; nothing is kept.
    Fail,
    /// 403 to everything (an instance metadata service that gives this
    /// host no credentials); nothing is kept.
    Forbidden,
    /// Requests are read and never answered.
    Silent,
}

/// A running server; stops when dropped.
pub struct HttpSink {
    address: String,
    mode: watch::Sender<Mode>,
    lines: Arc<Mutex<Vec<String>>>,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpSink {
    /// Listens on a free port of 127.0.0.1.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let address = listener.local_addr().unwrap().to_string();
        let (mode, mode_rx) = watch::channel(Mode::Ok);
        let (lines, requests) = (Arc::<Mutex<Vec<String>>>::default(), Arc::<Mutex<Vec<String>>>::default());
        let (l, r) = (lines.clone(), requests.clone());
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, mode_rx.clone(), l.clone(), r.clone()));
            }
        });
        Self { address, mode, lines, requests, task }
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Answers from now on as `mode` says.
    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Every line of every POST body kept so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Every request line (`METHOD PATH`) seen so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for HttpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut socket: TcpStream, mode: watch::Receiver<Mode>, lines: Arc<Mutex<Vec<String>>>, requests: Arc<Mutex<Vec<String>>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let request_line = head.lines().next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned());
    requests.lock().unwrap().push(format!("{method} {path}"));
    let current = *mode.borrow();
    let (status, body) = match current {
        Mode::Silent => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Mode::Fail => ("503 Service Unavailable", String::new()),
        Mode::Forbidden => ("403 Forbidden", String::new()),
        Mode::Ok if method == "POST" => {
            let body = String::from_utf8_lossy(&buffer[header_end..header_end + length]).into_owned();
            lines.lock().unwrap().extend(body.lines().map(str::to_owned));
            ("200 OK", String::new())
        }
        Mode::Ok => ("200 OK", format!("{{\"path\":\"{path}\",\"tier\":\"gold\"}}")),
    };
    let response = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{body}", body.len());
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}
