//! `kcl-host init NAME --lang rust|go`: a processor project that builds and
//! replays as created — a processor that parses records as JSON, logs and
//! checkpoints; a sample `records.jsonl`; a README with build → replay →
//! run. The SDK comes from the kcl-host checkout (by path, so nothing needs
//! publishing).

use std::path::{Path, PathBuf};

/// The processor's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Go,
}

/// Why a project could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("`{0}` already exists; choose another name or remove it")]
    Exists(PathBuf),
    #[error("`{0}` is not a usable name: use letters, digits, `-` and `_`, starting with a letter")]
    BadName(String),
    #[error("`{0}` names no new directory: give the project's directory, like `kcl-host init orders-totals`")]
    NoName(PathBuf),
    #[error("cannot write `{path}`: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

const RECORDS: &str = include_str!("../templates/records.jsonl");
const RUST: [(&str, &str); 3] = [
    ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
    ("src/lib.rs", include_str!("../templates/rust/src/lib.rs")),
    ("README.md", include_str!("../templates/rust/README.md")),
];
const GO: [(&str, &str); 3] = [
    ("go.mod", include_str!("../templates/go/go.mod")),
    ("main.go", include_str!("../templates/go/main.go")),
    ("README.md", include_str!("../templates/go/README.md")),
];

/// The kcl-host checkout this binary was built from: where the SDKs are.
pub fn default_sdk_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ is inside the checkout").to_path_buf()
}

/// Creates the project `dir` (its last component names it); returns the files written.
pub fn create(dir: &Path, lang: Lang, sdk_root: &Path) -> Result<Vec<PathBuf>, InitError> {
    let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
        return Err(InitError::NoName(dir.to_path_buf()));
    };
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(InitError::BadName(name));
    }
    if dir.exists() {
        return Err(InitError::Exists(dir.to_path_buf()));
    }
    let files: &[(&str, &str)] = match lang {
        Lang::Rust => &RUST,
        Lang::Go => &GO,
    };
    let sdk = sdk_root.display().to_string();
    let crate_name = name.replace('-', "_");
    let mut written = Vec::new();
    for (file, template) in files.iter().copied().chain([("records.jsonl", RECORDS)]) {
        let path = dir.join(file);
        let text = template.replace("{name}", &name).replace("{crate}", &crate_name).replace("{sdk}", &sdk);
        let write = |path: &Path| -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().expect("inside the project"))?;
            std::fs::write(path, text)
        };
        write(&path).map_err(|source| InitError::Write { path: path.clone(), source })?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_existing_directories_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(create(&dir.path().join("9lives"), Lang::Rust, Path::new("/sdk")), Err(InitError::BadName(_))));
        let files = create(&dir.path().join("my-proc"), Lang::Rust, Path::new("/sdk")).unwrap();
        assert_eq!(files.len(), 4);
        let cargo = std::fs::read_to_string(dir.path().join("my-proc/Cargo.toml")).unwrap();
        assert!(cargo.contains(r#"name = "my-proc""#) && cargo.contains(r#"path = "/sdk/guest-sdk/rust""#), "{cargo}");
        let readme = std::fs::read_to_string(dir.path().join("my-proc/README.md")).unwrap();
        assert!(readme.contains("release/my_proc.wasm"), "{readme}");
        assert!(matches!(create(&dir.path().join("my-proc"), Lang::Go, Path::new("/sdk")), Err(InitError::Exists(_))));
    }
}
