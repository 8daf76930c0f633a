//! A fault-injecting HTTP proxy on 127.0.0.1, put between `kcl-host` and
//! one of the local servers: it forwards each request as it is, unless a
//! rule the test set matches it, and then throttles, fails with a 5xx,
//! delays, resets, black-holes, or applies the request and loses its answer.
//! Deterministic: a rule matches by operation (`X-Amz-Target`) and by text
//! in the body (a lease key, a worker id), for a number of requests or
//! until it is cleared.
//!
//! Each request is forwarded on a connection of its own (`Connection:
//! close`), and the client's connection is closed after each answer, so the
//! proxy never has to frame a response stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What happens to a request a rule matches.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answered at once with this status and AWS error type, not forwarded
    /// (`500`/`InternalFailure`, `400`/`ThrottlingException`, ...).
    Fail(u16, &'static str),
    /// Forwarded after this long.
    Delay(Duration),
    /// The connection is closed without an answer.
    Reset,
    /// Never answered: the client gives up by its own timeout.
    BlackHole,
    /// Forwarded (the server applies it), then answered `500` as if the
    /// answer was lost on the way back.
    LoseAnswer,
}

/// Which requests a fault applies to.
#[derive(Clone, Debug)]
pub struct Rule {
    /// The end of the `X-Amz-Target` header (`GetRecords`, `UpdateItem`); any when `None`.
    pub operation: Option<&'static str>,
    /// A DynamoDB table the request names (its `TableName`, or any table
    /// of a transaction or a batch); any when `None`.
    pub table: Option<String>,
    /// Text the body must contain; any when `None`.
    pub body_contains: Option<String>,
    pub fault: Fault,
    /// How many requests it applies to; every one when `None`.
    pub times: Option<u32>,
}

impl Rule {
    /// `fault` for every request of `operation` (any, with `None`).
    pub fn every(operation: Option<&'static str>, fault: Fault) -> Self {
        Self { operation, table: None, body_contains: None, fault, times: None }
    }
}

/// What the proxy saw, for a test to check its faults were hit.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub forwarded: u64,
    pub faulted: u64,
    /// Every request, in the order it came.
    pub requests: Vec<Seen>,
    /// Black-holed requests whose client still waits on them.
    pub held: u64,
    /// How long the client waited on each black-holed request it gave up.
    pub given_up_after: Vec<Duration>,
}

/// One request the proxy saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The end of its `X-Amz-Target` (`GetRecords`).
    pub operation: String,
    /// The DynamoDB table it names (`TableName`), if any.
    pub table: Option<String>,
    /// The IAM actions it needs, on what.
    pub authorizations: Vec<crate::iam::Authorization>,
    pub at: tokio::time::Instant,
    pub faulted: bool,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    counts: Counts,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    /// `http://127.0.0.1:<port>`: give it to `kcl-host` as the endpoint.
    pub endpoint: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy in front of `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> Self {
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (state, upstream) = (shared.clone(), upstream.clone());
                tokio::spawn(async move {
                    let _ = serve(client, &upstream, &state).await;
                });
            }
        });
        Self { endpoint, state, task }
    }

    /// Replaces the rules: the first that matches a request applies.
    pub fn set(&self, rules: Vec<Rule>) {
        self.state.lock().unwrap().rules = rules;
    }

    /// Forwards everything again.
    pub fn clear(&self) {
        self.set(Vec::new());
    }

    pub fn counts(&self) -> Counts {
        self.state.lock().unwrap().counts.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request from the client.
struct Request {
    head: String,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    /// The request as sent upstream: on a connection of its own.
    fn upstream_bytes(&self) -> Vec<u8> {
        let mut head: Vec<&str> = self.head.lines().filter(|l| !l.to_ascii_lowercase().starts_with("connection:")).collect();
        head.push("Connection: close");
        let mut bytes = format!("{}\r\n\r\n", head.join("\r\n")).into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

async fn read_request(client: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let mut body = buffer[end + 4..].to_vec();
    let request = Request { head, body: Vec::new() };
    let length: usize = request.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while body.len() < length {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(Request { body, ..request }))
}

/// The fault for `request`, if a rule matches (and is used up by it).
fn fault_for(state: &Mutex<State>, request: &Request) -> Option<Fault> {
    let mut state = state.lock().unwrap();
    let target = request.header("x-amz-target").unwrap_or_default().to_owned();
    let operation = target.rsplit('.').next().unwrap_or_default().to_owned();
    let body = String::from_utf8_lossy(&request.body);
    let json = serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default();
    let tables = table_names(&json);
    let index = state.rules.iter().position(|rule| {
        rule.times != Some(0)
            && rule.operation.is_none_or(|op| target.ends_with(&format!(".{op}")))
            && rule.table.as_ref().is_none_or(|table| tables.contains(table))
            && rule.body_contains.as_deref().is_none_or(|text| body.contains(text))
    });
    let fault = index.map(|i| {
        let rule = &mut state.rules[i];
        if let Some(times) = &mut rule.times {
            *times -= 1;
        }
        rule.fault.clone()
    });
    match fault {
        Some(_) => state.counts.faulted += 1,
        None => state.counts.forwarded += 1,
    }
    let table = tables.into_iter().next();
    let authorizations = crate::iam::authorizations(&target, &json);
    state.counts.requests.push(Seen { operation, table, authorizations, at: tokio::time::Instant::now(), faulted: fault.is_some() });
    fault
}

/// The tables a DynamoDB request's JSON body names: its `TableName`, then
/// those of a transaction's items (`TransactItems[].Update.TableName`, ...)
/// and of a batch (`RequestItems`' keys), in order, each once.
fn table_names(value: &serde_json::Value) -> Vec<String> {
    let mut tables: Vec<String> = Vec::new();
    let mut add = |name: Option<&str>| {
        if let Some(name) = name
            && !tables.iter().any(|t| t == name)
        {
            tables.push(name.to_owned());
        }
    };
    add(value.get("TableName").and_then(|t| t.as_str()));
    for item in value.get("TransactItems").and_then(|items| items.as_array()).into_iter().flatten() {
        for action in item.as_object().into_iter().flat_map(|o| o.values()) {
            add(action.get("TableName").and_then(|t| t.as_str()));
        }
    }
    for name in value.get("RequestItems").and_then(|items| items.as_object()).into_iter().flat_map(|o| o.keys()) {
        add(Some(name));
    }
    tables
}

async fn serve(mut client: TcpStream, upstream: &str, state: &Mutex<State>) -> std::io::Result<()> {
    let Some(request) = read_request(&mut client).await? else { return Ok(()) };
    let fault = fault_for(state, &request);
    let answer = match fault {
        None => return relay(upstream, &request, client).await,
        Some(Fault::Delay(delay)) => {
            tokio::time::sleep(delay).await;
            return relay(upstream, &request, client).await;
        }
        Some(Fault::Fail(status, error)) => error_answer(status, error),
        Some(Fault::LoseAnswer) => {
            forward(upstream, &request).await?;
            error_answer(500, "InternalFailure")
        }
        Some(Fault::Reset) => return Ok(()),
        Some(Fault::BlackHole) => {
            // Hold the connection until the client gives up on it.
            let since = tokio::time::Instant::now();
            state.lock().unwrap().counts.held += 1;
            let mut rest = Vec::new();
            let _ = client.read_to_end(&mut rest).await;
            let mut state = state.lock().unwrap();
            state.counts.held -= 1;
            state.counts.given_up_after.push(since.elapsed());
            return Ok(());
        }
    };
    client.write_all(&answer).await?;
    client.shutdown().await
}

/// Forwards `request` and passes its answer on as it comes: a
/// `SubscribeToShard` answer is a stream of events that lasts minutes.
async fn relay(upstream: &str, request: &Request, mut client: TcpStream) -> std::io::Result<()> {
    let mut server = send(upstream, request).await?;
    tokio::io::copy(&mut server, &mut client).await?;
    client.shutdown().await
}

/// `request` sent upstream on a connection of its own, the answer to come.
async fn send(upstream: &str, request: &Request) -> std::io::Result<TcpStream> {
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(&request.upstream_bytes()).await?;
    Ok(server)
}

/// Forwards `request` and reads its whole answer.
async fn forward(upstream: &str, request: &Request) -> std::io::Result<Vec<u8>> {
    let mut server = send(upstream, request).await?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await?;
    Ok(answer)
}

/// An AWS JSON-protocol error answer.
fn error_answer(status: u16, error: &str) -> Vec<u8> {
    let body = format!(r#"{{"__type":"{error}","message":"injected by the test's fault proxy"}}"#);
    format!(
        "HTTP/1.1 {status} Injected\r\nContent-Type: application/x-amz-json-1.1\r\nx-amzn-RequestId: fault-proxy\r\n\
         x-amzn-ErrorType: {error}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
