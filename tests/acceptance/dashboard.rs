//! The dashboard in a real browser (headless Chromium) against a running
//! fleet: the seed's split, a worker killed, a deploy. The test reads the
//! page's DOM as the browser built it from `status.json`, and saves
//! screenshots beside the build (`target/tmp/dashboard-*.png`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use kcl_testkit::browser::{self, elements_with};

use super::*;

/// The shard rows of the page's shard table: lease key → its attributes.
fn shard_rows(dom: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    elements_with(dom, "data-state")
        .into_iter()
        .filter_map(|row| Some((row.get("data-shard")?.clone(), row)))
        .collect()
}

/// Whether the page shows `shard` in `state`, owned by `owner` (by anyone
/// for `Some("")`; whoever holds it, if anyone, for `None`).
fn shows(dom: &str, shard: &str, state: &str, owner: Option<&str>) -> bool {
    shard_rows(dom).get(shard).is_some_and(|row| {
        let owned = &row["data-owner"];
        row["data-state"] == state
            && match owner {
                None => true,
                Some("") => !owned.is_empty(),
                Some(o) => owned == o,
            }
    })
}

/// The rollout line's attributes.
fn rollout(dom: &str) -> BTreeMap<String, String> {
    elements_with(dom, "data-wanted").into_iter().next().unwrap_or_default()
}

fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dashboard-{name}.png"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_seeds_split_a_failover_and_a_rollout_as_they_happen() {
    let aws = clients().await;
    let stream = TestStream::create(&aws.kinesis, &unique("dashboard"), 1).await;
    let parent = stream.shards().await[0].id.clone();
    stream.put(&parent, &payloads("parent", 20)).await;
    let application = unique("dashboard-app");
    let admin = admin_address();
    let mut first = start_with("counter", &stream.name, &application, "worker-1", &["--failover-time", "2s", "--admin-listen", &admin]);
    first.wait_for("the parent's records", LIMIT, |log| count_lines(log, "kcl_host::guest: record ") >= 20).await;
    let second = start_with("counter", &stream.name, &application, "worker-2", &["--failover-time", "2s"]);
    let children = stream.split(&parent).await;
    for (i, child) in children.iter().enumerate() {
        stream.put(child, &payloads(&format!("child{i}"), 10)).await;
    }

    let mut dashboard = KclHost::spawn(
        env!("CARGO_BIN_EXE_kcl-host").as_ref(),
        &["dashboard", "--application", &application, "--listen", "127.0.0.1:0", "--failover-time", "2s"],
    );
    dashboard.wait_for("the dashboard's address", LIMIT, |log| log.iter().any(|l| l.contains("dashboard on http://"))).await;
    let log = dashboard.log().await;
    let line = log.iter().find(|l| l.contains("dashboard on http://")).unwrap();
    let url = line[line.find("http://").unwrap()..].split_whitespace().next().unwrap().to_owned();

    // The split: the parent at SHARD_END, each child processing on its own worker.
    let dom = browser::dom_until(&url, "the parent at SHARD_END and both children processing, one on each worker", LIMIT, |dom| {
        shows(dom, &parent, "shard-end", None)
            && shows(dom, &children[0], "processing", Some(""))
            && shows(dom, &children[1], "processing", Some(""))
            && shard_rows(dom)[&children[0]]["data-owner"] != shard_rows(dom)[&children[1]]["data-owner"]
    })
    .await;
    let lineage: Vec<_> = elements_with(&dom, "data-lineage").into_iter().map(|g| (g["data-lineage"].clone(), g["data-state"].clone())).collect();
    assert_eq!(lineage.len(), 3, "the parent and its two children in the lineage graph: {lineage:?}");
    assert!(lineage.contains(&(parent.clone(), "shard-end".into())), "{lineage:?}");
    let workers = elements_with(&dom, "data-worker");
    let open_leases: Vec<_> = workers.iter().map(|w| (w["data-worker"].as_str(), w["data-active"].as_str())).collect();
    assert_eq!(open_leases, [("worker-1", "1"), ("worker-2", "1")], "each worker holds its share of the open shards");
    browser::screenshot(&url, &screenshot_path("reshard"), 1400, 1000).await;

    // kill -9 of the second worker: its child moves to the first.
    let killed_at = Instant::now();
    second.kill().await;
    browser::dom_until(&url, "both children on worker-1", LIMIT, |dom| children.iter().all(|c| shows(dom, c, "processing", Some("worker-1")))).await;
    println!("the page showed the dead worker's shard under the other {:.1} s after kill -9 (failover time 2 s)", killed_at.elapsed().as_secs_f64());

    // A deploy: the canary shard on the new version first, then both.
    let (code, text) = run_to_exit(&["deploy", &guest("tagged"), "--application", &application], &[]).await;
    assert_eq!(code, 0, "{text}");
    first.wait_for("the canary's swap", LIMIT, |log| count_lines(log, "swapped the processor") >= 1).await;
    let dom = browser::dom_until(&url, "the canary", LIMIT, |dom| {
        let r = rollout(dom);
        r.get("data-running").is_some_and(|n| n == "2") && r.get("data-on-wanted").is_some_and(|n| n != "0")
    })
    .await;
    let wanted = rollout(&dom)["data-wanted"].clone();
    assert_eq!(rollout(&dom)["data-on-wanted"], "1", "the canary shows before the rest swap (one shard on {wanted}):\n{dom}");
    let on_wanted: Vec<_> = shard_rows(&dom).into_iter().filter(|(_, row)| row["data-processor"] == wanted).map(|(shard, _)| shard).collect();
    assert_eq!(on_wanted.len(), 1, "one canary shard: {on_wanted:?}");
    let trials: Vec<_> = elements_with(&dom, "data-worker").into_iter().map(|w| (w["data-worker"].clone(), w["data-trial"].clone())).collect();
    assert!(trials.contains(&("worker-1".to_owned(), wanted.clone())), "worker-1's rollout shows the version on trial: {trials:?}");
    browser::screenshot(&url, &screenshot_path("rollout"), 1400, 1000).await;
    browser::dom_until(&url, "every shard on the deployed version", LIMIT, |dom| rollout(dom).get("data-on-wanted").is_some_and(|n| n == "2")).await;

    // The worker's admin listener serves the same page and report; nothing but GET.
    let (status, page) = http_get(&admin, "/").await;
    assert!(status.contains("200") && page.contains("dashboard.js"), "{status}: {page}");
    let (status, json) = http_get(&admin, "/status.json").await;
    assert!(status.contains("200"), "{status}: {json}");
    let page_report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let (code, text) = run_to_exit(&["status", "--application", &application, "--json", "--failover-time", "2s"], &[]).await;
    assert_eq!(code, 0, "{text}");
    // stdout (the report) comes first in `text`, any log lines after it.
    let status_report: serde_json::Value = serde_json::Deserializer::from_str(&text).into_iter().next().unwrap().unwrap();
    let leases = |report: &serde_json::Value| -> Vec<(String, String, String)> {
        let field = |row: &serde_json::Value, name: &str| row[name].as_str().unwrap_or_default().to_owned();
        report["shards"].as_array().unwrap().iter().map(|row| (field(row, "shard"), field(row, "state"), field(row, "owner"))).collect()
    };
    assert_eq!(leases(&page_report), leases(&status_report), "the page's numbers are status --json's");
    for method in ["POST", "PUT", "DELETE"] {
        let (status, body) = http(&admin, method, "/status.json", "text/plain", b"").await;
        assert!(status.contains("405"), "{method} /status.json: {status} {body}");
    }
    let (status, _) = http(&admin, "POST", "/", "text/plain", b"").await;
    assert!(status.contains("405"), "POST /: {status}");

    dashboard.kill().await;
    let (code, log) = first.interrupt().await;
    assert!(code.success(), "{}", log.join("\n"));
}
