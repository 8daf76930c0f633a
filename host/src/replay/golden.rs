//! `replay --expect FILE`: a golden test of a processor. What the replay
//! did — each record sent, per target in the order sent; each checkpoint;
//! the state the checkpoints left — as JSON lines, compared with FILE; a
//! difference is printed as a line diff and fails the command.
//! `--update-expected` writes FILE instead.

use std::path::Path;

use serde_json::{json, Value};

use super::MemoryState;

/// The JSON lines of a replay's outcome.
pub fn render(sent: &[(String, String)], checkpoints: &[String], state: &MemoryState) -> String {
    let mut lines = Vec::new();
    for (target, line) in sent {
        let record: Value = serde_json::from_str(line).expect("an output line is JSON");
        lines.push(json!({ "sent": target, "record": record }));
    }
    lines.extend(checkpoints.iter().map(|at| json!({ "checkpoint": at })));
    lines.extend(state.file_values().into_iter().map(|(key, value)| json!({ "state": key, "value": value })));
    lines.iter().map(|line| line.to_string() + "\n").collect()
}

/// Compares `actual` with the file at `path` (or, with `update`, writes it).
/// Ok says what matched or was written; the error is the diff.
pub fn check(path: &Path, actual: &str, update: bool) -> Result<String, String> {
    let count = actual.lines().count();
    if update {
        std::fs::write(path, actual).map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
        return Ok(format!("expected: wrote {count} lines to {}", path.display()));
    }
    let expected = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the expected file `{}` ({e}); run once with --update-expected to write it", path.display()))?;
    if expected == actual {
        return Ok(format!("expected: all {count} lines match {}", path.display()));
    }
    let diff = similar::TextDiff::from_lines(expected.as_str(), actual);
    let shown = diff.unified_diff().context_radius(2).header(&path.display().to_string(), "this replay").to_string();
    Err(format!(
        "the replay differs from {} (- expected, + this replay; --update-expected accepts it):\n{shown}",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::StateChanges;

    #[test]
    fn sends_checkpoints_and_state_as_lines_and_a_difference_as_a_diff() {
        let state = MemoryState::default();
        state.commit(&StateChanges::from([("alice".into(), Some(b"12".to_vec())), ("raw".into(), Some(vec![0xff]))]));
        let sent = [("events".to_owned(), r#"{"partition_key":"a","data":"x"}"#.to_owned())];
        let actual = render(&sent, &["49000".into()], &state);
        assert_eq!(
            actual,
            concat!(
                r#"{"record":{"data":"x","partition_key":"a"},"sent":"events"}"#, "\n",
                r#"{"checkpoint":"49000"}"#, "\n",
                r#"{"state":"alice","value":"12"}"#, "\n",
                r#"{"state":"raw","value":{"data_base64":"/w=="}}"#, "\n",
            )
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("expected.jsonl");
        assert!(check(&path, &actual, false).unwrap_err().contains("--update-expected to write it"));
        assert!(check(&path, &actual, true).unwrap().contains("wrote 4 lines"));
        assert!(check(&path, &actual, false).unwrap().contains("all 4 lines match"));
        let changed = actual.replace(r#""value":"12""#, r#""value":"13""#);
        let diff = check(&path, &changed, false).unwrap_err();
        assert!(diff.contains("-{\"state\":\"alice\",\"value\":\"12\"}") && diff.contains("+{\"state\":\"alice\",\"value\":\"13\"}"), "{diff}");
    }
}
