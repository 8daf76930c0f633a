//! Where a guest's words end up: its `log` import and its stdout/stderr both
//! become host log events tagged with the shard and the processor version
//! that said them (so the log tells which version processed what).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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

/// Who is speaking: the shard, and the processor version serving it
/// ([`Processor::describe`](super::Processor::describe)).
#[derive(Clone)]
pub(crate) struct Speaker {
    pub(crate) shard: Arc<str>,
    pub(crate) processor: Arc<str>,
}

/// `message` cut to [`MAX_LINE`] bytes (at a character boundary), saying
/// how long it was.
fn capped(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MAX_LINE {
        return message.into();
    }
    let end = (0..=MAX_LINE).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
    format!("{}… (cut: the message had {} bytes, more than the {MAX_LINE} a line keeps)", &message[..end], message.len()).into()
}

/// Emits one guest log line at `level`.
pub(crate) fn emit(speaker: &Speaker, level: LogLevel, message: &str) {
    let (shard, processor) = (&*speaker.shard, &*speaker.processor);
    let message = capped(message);
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
        assert_eq!(capped("short"), "short");
        let long = "é".repeat(MAX_LINE); // two bytes each
        let cut = capped(&long);
        assert!(cut.len() < MAX_LINE + 100, "{} bytes", cut.len());
        assert!(cut.ends_with(&format!("(cut: the message had {} bytes, more than the {MAX_LINE} a line keeps)", 2 * MAX_LINE)), "{}", &cut[MAX_LINE - 10..]);
    }
}
