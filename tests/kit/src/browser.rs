//! Headless Chromium (Debian's `chromium`, or `$CHROMIUM`) for page tests:
//! a page's DOM after its scripts ran, read as the browser built it, and
//! screenshots. Each call is a fresh browser with an empty profile, kept
//! off the network but for the page (this machine refuses the rest).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The browser binary.
fn chromium() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

/// Runs Chromium headless on `url` with `extra` flags; its stdout. The
/// page's scripts run for `settle` of the page's (virtual) time first.
async fn headless(url: &str, settle: Duration, extra: &[String]) -> String {
    let profile = std::env::temp_dir().join(format!("kcl-chromium-{}-{:08x}", std::process::id(), fastrand::u32(..)));
    let mut command = tokio::process::Command::new(chromium());
    command
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"])
        .args(["--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={}", settle.as_millis()))
        .args(extra)
        .arg(url)
        .kill_on_drop(true);
    let output = command.output().await.unwrap_or_else(|e| panic!("cannot start {} ({e}): install Debian's chromium", chromium()));
    let _ = std::fs::remove_dir_all(&profile);
    assert!(output.status.success(), "chromium failed on {url}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The DOM of `url` once its scripts have run for `settle`, serialized.
pub async fn dom(url: &str, settle: Duration) -> String {
    headless(url, settle, &["--dump-dom".into()]).await
}

/// Reads the DOM of `url` again and again until `done` holds for it (or
/// panics after `limit`, with the last DOM); returns that DOM.
pub async fn dom_until(url: &str, what: &str, limit: Duration, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let dom = dom(url, Duration::from_millis(1500)).await;
        if done(&dom) {
            return dom;
        }
        assert!(start.elapsed() < limit, "the page did not show {what} within {limit:?}; its DOM:\n{dom}");
    }
}

/// A `width`×`height` screenshot of `url`, as PNG, at `path`.
pub async fn screenshot(url: &str, path: &Path, width: u32, height: u32) {
    let flags = [format!("--screenshot={}", path.display()), format!("--window-size={width},{height}")];
    headless(url, Duration::from_millis(3000), &flags).await;
    assert!(path.exists(), "chromium wrote no screenshot at {}", path.display());
}

/// The attributes of every element whose opening tag has the attribute
/// `marker`, in document order (values as serialized: `&amp;` and `&quot;` kept).
pub fn elements_with(dom: &str, marker: &str) -> Vec<BTreeMap<String, String>> {
    let needle = format!(" {marker}=\"");
    let mut found = Vec::new();
    let mut rest = dom;
    while let Some(at) = rest.find(&needle) {
        let open = rest[..at].rfind('<').expect("inside a tag");
        let close = at + rest[at..].find('>').expect("a closed tag");
        found.push(attributes(&rest[open..close]));
        rest = &rest[close..];
    }
    found
}

/// `name="value"` pairs of one opening tag.
fn attributes(tag: &str) -> BTreeMap<String, String> {
    let mut attributes = BTreeMap::new();
    let mut rest = tag;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].rsplit(char::is_whitespace).next().unwrap_or_default().to_owned();
        let value_end = rest[eq + 2..].find('"').expect("a closed value");
        attributes.insert(name, rest[eq + 2..eq + 2 + value_end].to_owned());
        rest = &rest[eq + 2 + value_end + 1..];
    }
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_found_by_their_marker_with_every_attribute() {
        let dom = r#"<table><tr data-shard="shardId-1" data-state="shard-end" data-owner=""><td>x</td></tr><tr class="a" data-shard="shardId-2" data-state="processing" data-owner="w-1"></tr></table>"#;
        let rows = elements_with(dom, "data-shard");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["data-state"], "shard-end");
        assert_eq!(rows[1]["data-owner"], "w-1");
        assert_eq!(rows[1]["class"], "a");
    }
}
