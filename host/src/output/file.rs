//! Standard output and file targets, for local runs and `replay`: JSON
//! lines (see [`json_lines`]), each prefixed on stdout with the target's
//! name so several targets can share it; and the lines `replay --expect`
//! keeps to compare.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::record::{json_lines, OutRecord};
use super::target::{Retries, Target, WriteFuture};

/// Where the lines go.
pub enum Lines {
    /// Standard output, each line as `NAME {...}`.
    Stdout {
        /// The target's name.
        name: String,
    },
    /// A file, appended to.
    File(PathBuf),
    /// Nowhere: a swap's canary input checks a new version without writing.
    Discard,
    /// Kept as `(name, line)` for `replay --expect` to compare.
    Recorded {
        /// The target's name.
        name: String,
        /// Every line sent to any recorded target, in order.
        into: Arc<Mutex<Vec<(String, String)>>>,
    },
}

impl Target for Lines {
    fn check(&self, _: &OutRecord<'_>) -> Result<(), String> {
        Ok(())
    }

    fn write<'a>(&'a self, records: &'a [OutRecord<'a>], _: &'a Retries) -> WriteFuture<'a> {
        Box::pin(async move {
            match self {
                Lines::Stdout { name } => {
                    let lines = json_lines(records);
                    let mut out = std::io::stdout().lock();
                    for line in lines.split_inclusive(|b| *b == b'\n') {
                        out.write_all(name.as_bytes()).and_then(|()| out.write_all(b" ")).and_then(|()| out.write_all(line)).map_err(|e| format!("stdout: {e}"))?;
                    }
                    out.flush().map_err(|e| format!("stdout: {e}"))?;
                }
                Lines::File(path) => {
                    let lines = json_lines(records);
                    let mut file = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .map_err(|e| format!("file:{}: {e}", path.display()))?;
                    // A device or a pipe (/dev/null, a FIFO) keeps nothing to sync, and refuses to.
                    let sync = |file: &std::fs::File| if file.metadata()?.is_file() { file.sync_data() } else { Ok(()) };
                    file.write_all(&lines).and_then(|()| sync(&file)).map_err(|e| format!("file:{}: {e}", path.display()))?;
                }
                Lines::Discard => {}
                Lines::Recorded { name, into } => {
                    let lines = json_lines(records);
                    let text = String::from_utf8_lossy(&lines);
                    into.lock().expect("not poisoned").extend(text.lines().map(|line| (name.clone(), line.to_owned())));
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_gets_its_lines_and_dev_null_takes_them_too() {
        let record = OutRecord { data: b"hello", partition_key: "k", explicit_hash_key: None };
        let path = std::env::temp_dir().join(format!("kcl-host-file-target-{}.jsonl", std::process::id()));
        for target in [Lines::File(path.clone()), Lines::File("/dev/null".into())] {
            target.write(&[record], &Retries::default()).await.expect("written");
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"partition_key\":\"k\",\"data\":\"hello\"}\n");
        std::fs::remove_file(path).unwrap();
    }
}
