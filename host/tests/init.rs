//! `kcl-host init` as a processor author runs it, from an installed binary
//! (a copy away from the checkout): each language's project builds with its
//! README's command, with nothing from a kcl-host checkout, and replays its
//! sample records.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The kcl-host binary, linked into a directory of its own once per test
/// run (a hard link: the debug binary is half a gigabyte). The directories
/// of earlier runs, whose processes are gone, are removed first.
fn installed() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        const PREFIX: &str = "kcl-host-installed-";
        for entry in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix(PREFIX)
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = std::env::temp_dir().join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("kcl-host");
        let _ = std::fs::remove_file(&copy);
        if std::fs::hard_link(env!("CARGO_BIN_EXE_kcl-host"), &copy).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_kcl-host"), &copy).unwrap();
        }
        copy
    })
    .clone()
}

fn kcl_host(args: &[&str], dir: &Path) -> String {
    let output = Command::new(installed()).args(args).current_dir(dir).env("NO_COLOR", "1").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "kcl-host {args:?}:\n{text}");
    text
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{command:?}:\n{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
}

/// The sample has two JSON records and one that is not: all three are
/// processed, the two events sent to `events` (printed by replay), one
/// checkpoint at the end.
fn assert_replays(wasm: &Path, project: &Path) {
    let text = kcl_host(&["replay", wasm.to_str().unwrap(), "--input", "records.jsonl", "--output", "events=stdout"], project);
    assert!(text.contains("replayed 3 records in 1 batches"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("events {\"partition_key\":")).count(), 2, "{text}");
    assert!(text.contains("1 checkpoints"), "{text}");
    assert!(text.contains("3 records, 1 not JSON"), "{text}");
    // The project's golden test, as its README gives it for CI.
    let text = kcl_host(&["replay", wasm.to_str().unwrap(), "--input", "records.jsonl", "--expect", "expected.jsonl"], project);
    assert!(text.contains("expected: all 3 lines match expected.jsonl"), "{text}");
}

#[test]
fn a_rust_project_builds_and_replays_as_created() {
    let dir = tempfile::tempdir().unwrap();
    kcl_host(&["init", "orders-totals", "--lang", "rust"], dir.path());
    let project = dir.path().join("orders-totals");
    // The README's build, with a target directory kept between test runs.
    let target = std::env::temp_dir().join("kcl-host-init-target");
    run(Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
        .args(["build", "--quiet", "--target", "wasm32-wasip2", "--release"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&project));
    assert_replays(&target.join("wasm32-wasip2/release/orders_totals.wasm"), &project);
}

/// A project of `lang` built with the build script the project carries in
/// `kcl/scripts`, which installs its tools into kcl/tools on first use:
/// here, the ones the test run installed.
fn script_built_project_replays(lang: &str, script: &str) {
    let dir = tempfile::tempdir().unwrap();
    kcl_host(&["init", "orders-totals", "--lang", lang], dir.path());
    let project = dir.path().join("orders-totals");
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools");
    link_missing(&tools.canonicalize().unwrap(), &project.join("kcl/tools"));
    run(Command::new("bash").args([&format!("kcl/scripts/{script}"), ".", "orders-totals.wasm"]).current_dir(&project));
    assert_replays(&project.join("orders-totals.wasm"), &project);
}

/// Links into `to` whatever of `from` it lacks (the bundle writes some of
/// kcl/tools itself: the files that pin the JavaScript tools).
fn link_missing(from: &Path, to: &Path) {
    if !to.exists() {
        std::os::unix::fs::symlink(from, to).unwrap();
    } else if from.is_dir() {
        for entry in std::fs::read_dir(from).unwrap() {
            let name = entry.unwrap().file_name();
            link_missing(&from.join(&name), &to.join(&name));
        }
    }
}

#[test]
fn a_go_project_builds_and_replays_as_created() {
    script_built_project_replays("go", "build-go.sh");
}

#[test]
fn a_python_project_builds_and_replays_as_created() {
    script_built_project_replays("python", "build-python.sh");
}

#[test]
fn a_javascript_project_builds_and_replays_as_created() {
    script_built_project_replays("js", "build-js.sh");
}
