//! `kcl-host status` as text: the report in at most 100 columns.

use super::{Report, ShardRow, State};
use crate::clock;
use crate::lease::LeaseKey;

impl ShardRow {
    /// The shard as the table shows it: `stream/shardId` in a multi-stream application.
    fn label(&self) -> String {
        match &self.stream {
            Some(stream) => format!("{stream}/{}", LeaseKey::from(&self.shard).shard_id()),
            None => self.shard.clone(),
        }
    }
}

/// `n` characters of `text` at most, the middle elided.
fn fit(text: &str, n: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= n {
        return text.to_owned();
    }
    let head = (n - 1) / 2;
    let tail = n - 1 - head;
    chars[..head].iter().chain(['…'].iter()).chain(chars[chars.len() - tail..].iter()).collect()
}

/// The report as text, at most 100 columns wide.
pub fn render(report: &Report) -> String {
    let lag = report.shards.iter().any(|r| r.lag_ms.is_some());
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut out = format!("{} — {}, {}\n", report.application, plural(report.shards.len(), "shard", "shards"), plural(report.workers.len(), "worker", "workers"));
    // As the workers report it: kinesis, dynamodb-streams.
    let sources: std::collections::BTreeSet<&str> = report.shards.iter().filter_map(|r| r.progress.as_ref()?.source.as_deref()).collect();
    if !sources.is_empty() {
        out.push_str(&format!("source: {}\n", sources.into_iter().collect::<Vec<_>>().join(", ")));
    }
    out.push_str(&format!("{:<21} {:<10} {:<20} {:<24} {:>8}", "SHARD", "STATE", "OWNER", "CHECKPOINT", "COUNTER"));
    out.push_str(if lag { "      LAG\n" } else { "\n" });
    // A multi-stream table's rows (sorted by key, so by stream) under a line per stream.
    let mut stream_shown = None;
    for row in &report.shards {
        if let Some(stream) = row.stream.as_deref().filter(|s| stream_shown != Some(*s)) {
            out.push_str(&fit(&format!("stream {stream}:"), 100));
            out.push('\n');
            stream_shown = Some(stream);
        }
        let checkpoint = match row.sub_sequence_number {
            0 => row.checkpoint.clone(),
            sub => format!("{}/{sub}", row.checkpoint),
        };
        out.push_str(&format!(
            "{:<21} {:<10} {:<20} {:<24} {:>8}",
            fit(LeaseKey::from(&row.shard).shard_id(), 21),
            row.state.label(),
            fit(row.owner.as_deref().unwrap_or("-"), 20),
            fit(&checkpoint, 24),
            row.counter
        ));
        if lag {
            out.push_str(&row.lag_ms.map_or("        -".to_owned(), |ms| format!(" {:>7}ms", ms)));
        }
        out.push('\n');
    }
    let now = clock::unix_ms();
    for row in &report.shards {
        let Some(retrying) = &row.retrying else { continue };
        let limit = retrying.limit.map_or("no limit: blocked".to_owned(), |n| format!("gives up after {}", n + 1));
        let line = format!("{} retrying {}s, {} failures ({limit}): ", row.label(), now.saturating_sub(retrying.since_ms) / 1000, retrying.attempts);
        // The error's start says what it is; its end (a backtrace) can go.
        let room = 100usize.saturating_sub(line.chars().count());
        let error: String = retrying.last_error.lines().next().unwrap_or_default().chars().take(room).collect();
        out.push_str(&line);
        out.push_str(&error);
        out.push('\n');
    }
    for row in &report.shards {
        let Some(size) = row.state_size.as_ref().filter(|size| size.keys > 0 || size.log_items > 0) else { continue };
        let mut line = format!("{} state: {} keys, {:.1} MiB", row.label(), size.keys, size.bytes as f64 / (1 << 20) as f64);
        if size.log_items > 0 {
            line.push_str(&format!(", {} state log items", size.log_items));
        }
        out.push_str(&fit(&line, 100));
        out.push('\n');
    }
    for row in report.shards.iter().filter(|row| row.state == State::Processing || row.state == State::Retrying) {
        let Some(f) = &row.in_flight else { continue };
        let line = format!("{} {} instances: {} calls in flight, slowest {} records behind the fastest", row.label(), f.instances, f.calls, f.lag_records);
        out.push_str(&fit(&line, 100));
        out.push('\n');
    }
    out.push_str(&format!("\n{:<40} {:>6}  {:<20} {}\n", "WORKER", "LEASES", "HEARTBEAT", "PROCESSOR"));
    for worker in &report.workers {
        let beat = match (worker.heartbeat_age_ms, worker.kcl3_report_age_ms) {
            (Some(ms), _) => format!("{:.1}s ago", ms as f64 / 1000.0),
            (None, Some(ms)) => format!("3.x report {}s ago", ms / 1000),
            (None, None) => "none (not kcl-host)".to_owned(),
        };
        let processor = fit(worker.processor.as_deref().unwrap_or("-"), 30);
        out.push_str(&format!("{:<40} {:>6}  {beat:<20} {processor}\n", fit(&worker.worker, 40), worker.leases));
    }
    for worker in &report.workers {
        let Some(rollout) = &worker.rollout else { continue };
        let mut line = format!("{} rollout:", worker.worker);
        match (&rollout.trial, &rollout.canary, rollout.probation_until_ms) {
            (Some(trial), Some(canary), _) => line.push_str(&format!(" {trial} on its canary {canary};")),
            (Some(trial), None, Some(until)) => line.push_str(&format!(" {trial} on probation for {}s more;", until.saturating_sub(now) / 1000)),
            _ => {}
        }
        if !rollout.rolled_back.is_empty() {
            line.push_str(&format!(" rolled back: {};", rollout.rolled_back.join(", ")));
        }
        out.push_str(&fit(line.trim_end_matches(';'), 100));
        out.push('\n');
    }
    if let Some(deployed) = &report.deployed {
        let previous = deployed.previous.as_deref().map_or(String::new(), |p| format!(", rollback to {p}"));
        out.push_str(&fit(&format!("deployed: {} from {}{previous}", deployed.processor, deployed.source), 100));
        out.push('\n');
    }
    for key in &report.unreadable {
        out.push_str(&format!("unreadable row: {key} (left as it is)\n"));
    }
    out
}

