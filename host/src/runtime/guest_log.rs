//! Where a guest's words end up: its `log` import and its stdout/stderr both
//! become host log events tagged with the shard and the processor version
//! that said them (so the log tells which version processed what).
//!
//! Nothing a guest says is kept whole: a line is cut at [`MAX_LINE`] bytes,
//! an error at [`MAX_ERROR`], and an instance logs at most
//! [`LINES_PER_SECOND`] lines and [`BYTES_PER_SECOND`] bytes a second (a
//! second's worth at once, as a log driver's rate limit); what it says over
//! that is dropped, and the host says how much once it may speak again.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::LogLevel;

/// Log target of every event a guest causes, so operators can filter on it.
pub const GUEST_TARGET: &str = "kcl_host::guest";

/// Longest line kept from a guest's stdout/stderr (longer lines are split)
/// and from its `log` import (longer messages are cut, and say so).
const MAX_LINE: usize = 8 * 1024;

/// Longest error message kept from a guest (`retryable`, `fatal`,
/// `failed-at`): it is logged, kept for `status` and put in dead letters.
pub const MAX_ERROR: usize = 4 * 1024;

/// Most lines and bytes one instance may log a second.
const LINES_PER_SECOND: f64 = 1_000.0;
const BYTES_PER_SECOND: f64 = 1024.0 * 1024.0;

/// Who is speaking: the shard, and the processor version serving it
/// ([`Processor::describe`](super::Processor::describe)), and how much
/// more it may say now.
#[derive(Clone)]
pub(crate) struct Speaker {
    pub(crate) shard: Arc<str>,
    pub(crate) processor: Arc<str>,
    budget: Arc<Mutex<Budget>>,
}

impl Speaker {
    pub(crate) fn new(shard: &str, processor: &str) -> Self {
        let (shard, processor): (Arc<str>, Arc<str>) = (shard.into(), processor.into());
        let budget = Arc::new(Mutex::new(Budget::full(Some((shard.clone(), processor.clone())))));
        Self { shard, processor, budget }
    }
}

/// A token bucket of lines and bytes, and what was dropped since the last
/// line let through (said when the instance ends, if nothing was let
/// through since).
struct Budget {
    /// Whose it is (shard, processor), for that last word.
    speaker: Option<(Arc<str>, Arc<str>)>,
    lines: f64,
    bytes: f64,
    refilled: Instant,
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl Budget {
    fn full(speaker: Option<(Arc<str>, Arc<str>)>) -> Self {
        Budget { speaker, lines: LINES_PER_SECOND, bytes: BYTES_PER_SECOND, refilled: Instant::now(), dropped_lines: 0, dropped_bytes: 0 }
    }

    /// Whether a line of `len` bytes may be logged now; when it may, what
    /// was dropped before it (lines, bytes) is handed back once.
    fn admit(&mut self, len: usize, now: Instant) -> Result<Option<(u64, u64)>, ()> {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.lines = (self.lines + elapsed * LINES_PER_SECOND).min(LINES_PER_SECOND);
        self.bytes = (self.bytes + elapsed * BYTES_PER_SECOND).min(BYTES_PER_SECOND);
        if self.lines < 1.0 || self.bytes < len as f64 {
            self.dropped_lines += 1;
            self.dropped_bytes += len as u64;
            return Err(());
        }
        self.lines -= 1.0;
        self.bytes -= len as f64;
        let dropped = (self.dropped_lines > 0).then_some((self.dropped_lines, self.dropped_bytes));
        (self.dropped_lines, self.dropped_bytes) = (0, 0);
        Ok(dropped)
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        if let Some((shard, processor)) = &self.speaker
            && self.dropped_lines > 0
        {
            say_dropped(shard, processor, (self.dropped_lines, self.dropped_bytes));
        }
    }
}

fn say_dropped(shard: &str, processor: &str, (lines, bytes): (u64, u64)) {
    tracing::warn!(
        target: GUEST_TARGET,
        shard,
        processor,
        "dropped {lines} lines ({bytes} bytes) of this processor's output: an instance logs at most {LINES_PER_SECOND} lines and {BYTES_PER_SECOND} bytes a second"
    );
}

/// `message` cut to `max` bytes (at a character boundary), saying how long
/// it was.
pub fn cut(message: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if message.len() <= max {
        return message.into();
    }
    let end = (0..=max).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
    format!("{}… (cut: the message had {} bytes, more than the {max} kept)", &message[..end], message.len()).into()
}

/// Emits one guest log line at `level`, unless the speaker is over its rate.
pub(crate) fn emit(speaker: &Speaker, level: LogLevel, message: &str) {
    let (shard, processor) = (&*speaker.shard, &*speaker.processor);
    let message = cut(message, MAX_LINE);
    let admitted = speaker.budget.lock().expect("not poisoned").admit(message.len(), Instant::now());
    match admitted {
        Err(()) => return,
        Ok(Some(dropped)) => say_dropped(shard, processor, dropped),
        Ok(None) => {}
    }
    match level {
        LogLevel::Trace => tracing::trace!(target: GUEST_TARGET, shard, processor, "{message}"),
        LogLevel::Debug => tracing::debug!(target: GUEST_TARGET, shard, processor, "{message}"),
        LogLevel::Info => tracing::info!(target: GUEST_TARGET, shard, processor, "{message}"),
        LogLevel::Warn => tracing::warn!(target: GUEST_TARGET, shard, processor, "{message}"),
        LogLevel::Error => tracing::error!(target: GUEST_TARGET, shard, processor, "{message}"),
    }
}

/// A guest's stdout or stderr, forwarded line by line to the host log
/// (stdout at info, stderr at warn).
#[derive(Clone)]
pub(crate) struct GuestOutput {
    speaker: Speaker,
    level: LogLevel,
}

impl GuestOutput {
    pub(crate) fn stdout(speaker: Speaker) -> Self {
        Self { speaker, level: LogLevel::Info }
    }

    pub(crate) fn stderr(speaker: Speaker) -> Self {
        Self { speaker, level: LogLevel::Warn }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

// Lines are emitted as they are written, inside the guest's call, so a
// panic message is in the log before the trap it precedes is reported.
impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.writer())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.writer())
    }
}

impl GuestOutput {
    fn writer(&self) -> LineWriter {
        LineWriter { output: self.clone(), pending: Vec::new() }
    }
}

/// Buffers bytes until a newline, then emits the line.
struct LineWriter {
    output: GuestOutput,
    pending: Vec<u8>,
}

impl LineWriter {
    fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                self.emit_pending();
            } else {
                self.pending.push(byte);
                if self.pending.len() >= MAX_LINE {
                    self.emit_pending();
                }
            }
        }
    }

    fn emit_pending(&mut self) {
        if !self.pending.is_empty() {
            let line = String::from_utf8_lossy(&self.pending);
            emit(&self.output.speaker, self.output.level, line.trim_end_matches('\r'));
            self.pending.clear();
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().emit_pending();
        Poll::Ready(Ok(()))
    }
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_LINE)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        self.emit_pending();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_log_message_is_cut_and_says_so() {
        assert_eq!(cut("short", MAX_LINE), "short");
        let long = "é".repeat(MAX_LINE); // two bytes each
        let kept = cut(&long, MAX_LINE);
        assert!(kept.len() < MAX_LINE + 100, "{} bytes", kept.len());
        assert!(kept.ends_with(&format!("(cut: the message had {} bytes, more than the {MAX_LINE} kept)", 2 * MAX_LINE)), "{}", &kept[MAX_LINE - 10..]);
    }

    #[test]
    fn an_instance_over_its_rate_is_dropped_and_told_how_much_once_it_may_speak() {
        let start = Instant::now();
        let mut budget = Budget::full(None);
        budget.refilled = start;
        // A second's worth of lines at once, then nothing.
        for _ in 0..LINES_PER_SECOND as usize {
            assert_eq!(budget.admit(10, start), Ok(None));
        }
        assert_eq!(budget.admit(10, start), Err(()));
        assert_eq!(budget.admit(20, start), Err(()));
        // A tenth of a second later: 100 lines more, the first says what was dropped.
        let later = start + std::time::Duration::from_millis(100);
        assert_eq!(budget.admit(10, later), Ok(Some((2, 30))));
        assert_eq!(budget.admit(10, later), Ok(None));
        // Bytes count too: a second's worth of bytes is all there is.
        let mut budget = Budget::full(None);
        assert_eq!(budget.admit(MAX_LINE, start), Ok(None));
        assert!((0..200).filter(|_| budget.admit(MAX_LINE, start).is_ok()).count() < BYTES_PER_SECOND as usize / MAX_LINE);
    }
}
