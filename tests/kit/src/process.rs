//! `kcl-host` as a child process, with its log read line by line so tests
//! wait for what it says rather than for a fixed time.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{watch, Mutex};

/// A record as the counter example logs it (`record <seq> <key> <data>`),
/// or the swap tests' tagged v2 (`record-v2 ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    pub shard: String,
    pub sequence_number: String,
    pub data: String,
    /// The version that processed it, as the host tags each guest line:
    /// its hash, then `(name@version)` when the component has them.
    pub processor: String,
}

/// A running `kcl-host` (or another worker that logs its records the same
/// way: the Java KCL 3.x worker of [`crate::java_kcl3`]).
pub struct KclHost {
    child: Child,
    readers: Vec<tokio::task::JoinHandle<()>>,
    lines: Arc<Mutex<Vec<String>>>,
    changed: watch::Receiver<usize>,
}

impl KclHost {
    /// Starts `binary` with `args`; its log (stderr and stdout) is collected.
    pub fn spawn(binary: &Path, args: &[&str]) -> Self {
        Self::spawn_with_env(binary, args, &[])
    }

    /// [`Self::spawn`] with `env` set too (an endpoint through a fault proxy, say).
    pub fn spawn_with_env(binary: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(binary)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting kcl-host");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, changed) = watch::channel(0);
        let tx = Arc::new(tx);
        let mut readers = Vec::new();
        for stream in [Box::new(child.stderr.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>, Box::new(child.stdout.take().unwrap())] {
            let (lines, tx) = (lines.clone(), tx.clone());
            readers.push(tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    let mut all = lines.lock().await;
                    all.push(line);
                    tx.send_replace(all.len());
                }
            }));
        }
        Self { child, readers, lines, changed }
    }

    /// Every line so far.
    pub async fn log(&self) -> Vec<String> {
        self.lines.lock().await.clone()
    }

    /// Waits until `done` holds for the log, or panics with the log once
    /// the process has said nothing new for `limit` (a slow machine that is
    /// still making progress gets more time, up to three times `limit`).
    pub async fn wait_for(&mut self, what: &str, limit: Duration, done: impl Fn(&[String]) -> bool) {
        let started = tokio::time::Instant::now();
        let last_chance = started + limit * 3;
        loop {
            if done(&self.lines.lock().await) {
                return;
            }
            let quiet_until = (tokio::time::Instant::now() + limit).min(last_chance);
            match tokio::time::timeout_at(quiet_until, self.changed.changed()).await {
                Ok(Ok(())) => {}
                // Both log readers are done: the process closed its output
                // (it exited), so nothing it says can come any more.
                Ok(Err(_)) => {
                    let log = self.log().await;
                    assert!(done(&log), "kcl-host exited while a test waited for {what}; log:\n{}", log.join("\n"));
                    return;
                }
                Err(_) => panic!("timed out after {:?} waiting for {what}; log:\n{}", started.elapsed(), self.log().await.join("\n")),
            }
        }
    }

    /// Records delivered so far, in log order.
    pub async fn delivered(&self) -> Vec<Delivered> {
        self.lines.lock().await.iter().filter_map(|line| parse_delivered(line)).collect()
    }

    /// Whether the process has exited already.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("the process's status").is_some()
    }

    /// CPU time (user and system) the process has used so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        process_usage(self.child.id().expect("running")).cpu_seconds
    }

    /// Resident memory of the process now, in MiB (`VmRSS`).
    pub fn rss_mib(&self) -> f64 {
        process_usage(self.child.id().expect("running")).rss_mib
    }

    /// CPU time and resident memory of the process and every process it
    /// started that is still running (a JVM and its children, say).
    pub fn tree_usage(&self) -> Usage {
        let root = self.child.id().expect("running");
        let mut tree = vec![root];
        // /proc lists parents before the children they started (pids grow), so one pass finds the tree.
        let mut pids: Vec<u32> = std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
        pids.sort_unstable();
        for pid in pids {
            if tree.contains(&parent(pid).unwrap_or(0)) {
                tree.push(pid);
            }
        }
        tree.into_iter().map(process_usage).fold(Usage::default(), |a, b| Usage { cpu_seconds: a.cpu_seconds + b.cpu_seconds, rss_mib: a.rss_mib + b.rss_mib })
    }

    /// Sends a signal (SIGSTOP, SIGCONT, ...) and returns at once.
    pub fn signal(&self, signal: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child process.
        unsafe { libc_kill(pid, signal) };
    }

    /// Sends SIGINT and waits for the exit status.
    pub async fn interrupt(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child process.
        unsafe { libc_kill(pid, 2) };
        let status = tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await.expect("kcl-host exits after SIGINT").unwrap();
        // The readers end at end-of-file, after the last line the process wrote.
        for reader in self.readers.drain(..) {
            reader.await.expect("log reader");
        }
        let log = self.log().await;
        (status, log)
    }

    /// Waits for the process to exit by itself (within `limit`).
    pub async fn wait_exit(mut self, limit: Duration) -> (std::process::ExitStatus, Vec<String>) {
        let Ok(status) = tokio::time::timeout(limit, self.child.wait()).await else {
            panic!("kcl-host did not exit by itself within {limit:?}; log:\n{}", self.log().await.join("\n"));
        };
        let status = status.unwrap();
        for reader in self.readers.drain(..) {
            reader.await.expect("log reader");
        }
        let log = self.log().await;
        (status, log)
    }

    /// Kills the process at once, as a crash would; returns what it logged
    /// (every line it wrote before it died).
    pub async fn kill(mut self) -> Vec<String> {
        self.child.kill().await.expect("kill");
        for reader in self.readers.drain(..) {
            reader.await.expect("log reader");
        }
        self.log().await
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

/// What a process uses, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// CPU time, user and system, in seconds (with the children it waited for).
    pub cpu_seconds: f64,
    /// Resident memory now (`VmRSS`), in MiB.
    pub rss_mib: f64,
}

/// The fields of /proc/PID/stat after the command's `(name)`: state is field 3 of the line.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_owned).collect())
}

fn parent(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// [`Usage`] of `pid`, zero for a process that is gone.
fn process_usage(pid: u32) -> Usage {
    let Some(fields) = stat_fields(pid) else { return Usage::default() };
    // utime, stime, and those of the children it waited for: fields 14-17 of the line, in clock ticks (100 a second).
    let ticks: u64 = fields[11..15].iter().map(|f| f.parse::<u64>().unwrap()).sum();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0.0);
    Usage { cpu_seconds: ticks as f64 / 100.0, rss_mib: kib / 1024.0 }
}

/// Parses a line the counter, the tagged guest or the Java KCL 3.x worker
/// ([`crate::java_kcl3`]) logged:
/// `... kcl_host::guest: record <seq> <key> <data> shard="<id>" processor="<version>"`.
pub fn parse_delivered(line: &str) -> Option<Delivered> {
    let (_, rest) = ["kcl_host::guest: record ", "kcl_host::guest: record-v2 ", "java-kcl: record "].iter().find_map(|tag| line.split_once(tag))?;
    let (body, fields) = rest.rsplit_once(" shard=\"")?;
    let (shard, fields) = fields.split_once('"')?;
    let processor = fields.trim().strip_prefix("processor=\"")?.strip_suffix('"')?;
    let mut parts = body.splitn(3, ' ');
    let sequence_number = parts.next()?.to_owned();
    let _key = parts.next()?;
    let data = parts.next().unwrap_or("").to_owned();
    Some(Delivered { shard: shard.to_owned(), sequence_number, data, processor: processor.to_owned() })
}

/// Seconds since midnight (UTC) of a log line's RFC 3339 timestamp: for
/// the time between two lines of one run.
pub fn log_seconds(line: &str) -> f64 {
    let time = line.split('T').nth(1).expect("timestamped line");
    let time = &time[..time.find('Z').expect("UTC")];
    time.split(':').map(|part| part.parse::<f64>().unwrap()).fold(0.0, |total, part| total * 60.0 + part)
}

/// The requests a worker sent, by operation (`DynamoDB.UpdateItem` → 12),
/// from the line it logs as it exits.
pub fn requests_sent(log: &[String]) -> std::collections::BTreeMap<String, u64> {
    let line = log.iter().find(|l| l.contains("requests sent: ")).expect("the exit line");
    let pairs = line.split_once("requests sent: ").unwrap().1.split_whitespace().filter_map(|pair| pair.split_once('='));
    pairs.map(|(op, n)| (op.to_owned(), n.parse().unwrap())).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_guest_line_gives_its_record_shard_and_version() {
        let line = r#"2026-12-03T15:27:38Z  INFO worker{worker=w1}: kcl_host::guest: record-v2 4900 key-1 hello world shard="shardId-000000000000" processor="59979557d27c (tagged@2.0.0)""#;
        let d = super::parse_delivered(line).unwrap();
        assert_eq!((d.shard.as_str(), d.sequence_number.as_str(), d.data.as_str()), ("shardId-000000000000", "4900", "hello world"));
        assert_eq!(d.processor, "59979557d27c (tagged@2.0.0)");
        assert!(super::parse_delivered(&line.replace("record-v2", "initialize-v2")).is_none());
    }
}
