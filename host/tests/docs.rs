//! The user guide stays true: every flag the README and `docs/` give a
//! `kcl-host` command exists, every flag of `kcl-host run` is in
//! docs/REFERENCE.md, and the commands marked `<!-- run by
//! host/tests/docs.rs -->` run as written.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SUBCOMMANDS: [&str; 8] = ["run", "replay", "status", "dashboard", "deploy", "state", "iam-policy", "init"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The guide: the README and every page under docs/.
fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "md")).collect();
    docs.sort();
    paths.extend(docs);
    paths.into_iter().map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap())).collect()
}

/// The long flags `--help` of `subcommand` (or of kcl-host itself) lists,
/// and those of its own subcommands (`state dump`).
fn flags(subcommand: Option<&str>) -> BTreeSet<String> {
    let help = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_kcl-host")).args(args).arg("--help").output().unwrap();
        assert!(output.status.success(), "kcl-host {args:?} --help");
        String::from_utf8(output.stdout).unwrap()
    };
    let Some(subcommand) = subcommand else { return long_flags(&help(&[])) };
    let text = help(&[subcommand]);
    let mut found = long_flags(&text);
    // "Commands:" lists the nested ones, one per line, until a blank line.
    for line in text.lines().skip_while(|l| *l != "Commands:").skip(1).take_while(|l| !l.is_empty()) {
        if let Some(nested) = line.split_whitespace().next().filter(|n| *n != "help") {
            found.extend(long_flags(&help(&[subcommand, nested])));
        }
    }
    found
}

fn long_flags(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let name: String = text[i + 2..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        let before = text[..i].chars().last();
        if name.len() > 1 && name.starts_with(|c: char| c.is_ascii_lowercase()) && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-') {
            found.insert(format!("--{name}"));
        }
    }
    found
}

#[test]
fn every_flag_of_run_is_in_the_reference() {
    let reference = std::fs::read_to_string(root().join("docs/REFERENCE.md")).unwrap();
    let missing: Vec<String> = flags(Some("run")).into_iter().filter(|f| f != "--help" && f != "--version" && !reference.contains(&format!("`{f}"))).collect();
    assert!(missing.is_empty(), "flags of `kcl-host run` missing from docs/REFERENCE.md: {missing:?}");
}

#[test]
fn every_flag_the_guide_gives_kcl_host_exists() {
    let global = flags(None);
    let mut wrong = Vec::new();
    for (path, text) in pages() {
        // A command: `kcl-host SUBCOMMAND ...`, continued over lines ending in `\`.
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let Some(at) = line.find("kcl-host ") else { continue };
            let mut command = line[at..].to_owned();
            while command.trim_end().ends_with('\\') {
                let Some(next) = lines.next() else { break };
                command.push_str(next);
            }
            let Some(subcommand) = SUBCOMMANDS.iter().find(|s| command["kcl-host ".len()..].starts_with(&format!("{s} "))) else { continue };
            // The command ends where its code span or a comment does.
            let command = command.split(['`', '#']).next().unwrap();
            let known = flags(Some(subcommand));
            for flag in long_flags(command) {
                if !known.contains(&flag) && !global.contains(&flag) {
                    wrong.push(format!("{}: `kcl-host {subcommand}` has no {flag}", path.display()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_getting_started_commands_run_as_written() {
    let page = std::fs::read_to_string(root().join("docs/GETTING-STARTED.md")).unwrap();
    let marker = "<!-- run by host/tests/docs.rs -->\n```sh\n";
    let start = page.find(marker).expect("a block marked to run") + marker.len();
    let script = &page[start..start + page[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_kcl-host")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir.path())
        .env("PATH", path)
        // As a reader runs it: the project's own target directory.
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{script}\n{text}");
    assert!(text.contains("replayed 3 records in 1 batches") && text.contains("1 checkpoints"), "{text}");
}
