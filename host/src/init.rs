//! `kcl-host init NAME --lang rust|go|python|js`: a processor project that builds and
//! replays as created — a processor that parses records as JSON, logs and
//! checkpoints; a sample `records.jsonl`; a README with build → replay →
//! run. The SDK and its build scripts are copied into the project's `kcl/`
//! from the copy built into this binary, so the project builds wherever it
//! is, with no kcl-host checkout; `--sdk` points at a checkout instead (to
//! work on the SDK itself).

use std::path::{Path, PathBuf};

/// The processor's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A Rust crate built for `wasm32-wasip2`.
    Rust,
    /// A Go module built with Go's `wasip1` port and wrapped as a component.
    Go,
    /// A Python app built with componentize-py (CPython inside the component).
    Python,
    /// A JavaScript app built with componentize-js (SpiderMonkey inside the component).
    Js,
}

/// Why a project could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The directory exists.
    #[error("`{0}` already exists; choose another name or remove it")]
    Exists(PathBuf),
    /// The name cannot be a package name.
    #[error("`{0}` is not a usable name: use letters, digits, `-` and `_`, starting with a letter")]
    BadName(String),
    /// The path has no last component to name the project by.
    #[error("`{0}` names no new directory: give the project's directory, like `kcl-host init orders-totals`")]
    NoName(PathBuf),
    /// `--sdk` is not a kcl-host checkout.
    #[error("`{0}` is not a kcl-host checkout (it has no guest-sdk/rust/Cargo.toml); leave --sdk out to copy the SDK into the project")]
    NoSdk(PathBuf),
    /// A file could not be written.
    #[error("cannot write `{path}`: {source}")]
    #[allow(missing_docs)] // fields named in the message
    Write { path: PathBuf, source: std::io::Error },
}

const RECORDS: &str = include_str!("../templates/records.jsonl");
const RUST: [(&str, &str); 4] = [
    ("expected.jsonl", include_str!("../templates/rust/expected.jsonl")),
    ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
    ("src/lib.rs", include_str!("../templates/rust/src/lib.rs")),
    ("README.md", include_str!("../templates/rust/README.md")),
];
const GO: [(&str, &str); 4] = [
    ("expected.jsonl", include_str!("../templates/go/expected.jsonl")),
    ("go.mod", include_str!("../templates/go/go.mod")),
    ("main.go", include_str!("../templates/go/main.go")),
    ("README.md", include_str!("../templates/go/README.md")),
];
const PYTHON: [(&str, &str); 3] = [
    ("expected.jsonl", include_str!("../templates/python/expected.jsonl")),
    ("app.py", include_str!("../templates/python/app.py")),
    ("README.md", include_str!("../templates/python/README.md")),
];
const JS: [(&str, &str); 3] = [
    ("expected.jsonl", include_str!("../templates/js/expected.jsonl")),
    ("app.js", include_str!("../templates/js/app.js")),
    ("README.md", include_str!("../templates/js/README.md")),
];

/// The SDKs, the WIT and the build scripts (with what pins their tools), as a project's `kcl/` holds
/// them: the checkout's layout, so the templates and scripts work alike.
const BUNDLE: [(&str, &str); 80] = [
    ("wit/processor.wit", include_str!("../../wit/processor.wit")),
    ("guest-sdk/rust/src/lib.rs", include_str!("../../guest-sdk/rust/src/lib.rs")),
    ("guest-sdk/rust/src/adapter.rs", include_str!("../../guest-sdk/rust/src/adapter.rs")),
    ("guest-sdk/rust/src/checkpointer.rs", include_str!("../../guest-sdk/rust/src/checkpointer.rs")),
    ("guest-sdk/rust/src/log.rs", include_str!("../../guest-sdk/rust/src/log.rs")),
    ("guest-sdk/rust/src/types.rs", include_str!("../../guest-sdk/rust/src/types.rs")),
    ("guest-sdk/rust/src/output.rs", include_str!("../../guest-sdk/rust/src/output.rs")),
    ("guest-sdk/rust/src/config.rs", include_str!("../../guest-sdk/rust/src/config.rs")),
    ("guest-sdk/rust/src/state.rs", include_str!("../../guest-sdk/rust/src/state.rs")),
    ("guest-sdk/rust/src/change.rs", include_str!("../../guest-sdk/rust/src/change.rs")),
    ("wit/deps/config/store.wit", include_str!("../../wit/deps/config/store.wit")),
    ("wit/deps/config/world.wit", include_str!("../../wit/deps/config/world.wit")),
    ("guest-sdk/go/go.mod", include_str!("../../guest-sdk/go/go.mod")),
    ("guest-sdk/go/README.md", include_str!("../../guest-sdk/go/README.md")),
    ("guest-sdk/go/kcl.go", include_str!("../../guest-sdk/go/kcl.go")),
    ("guest-sdk/go/output.go", include_str!("../../guest-sdk/go/output.go")),
    ("guest-sdk/go/config.go", include_str!("../../guest-sdk/go/config.go")),
    ("guest-sdk/go/state.go", include_str!("../../guest-sdk/go/state.go")),
    ("guest-sdk/go/change.go", include_str!("../../guest-sdk/go/change.go")),
    ("guest-sdk/go/window.go", include_str!("../../guest-sdk/go/window.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_window/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_window/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_window/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_window/empty.s")),
    ("guest-sdk/go/internal/wit/exports/export_kcl_processor_window/exports.go", include_str!("../../guest-sdk/go/internal/wit/exports/export_kcl_processor_window/exports.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_state/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_state/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_state/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_state/empty.s")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_output/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_output/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_output/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_output/empty.s")),
    ("guest-sdk/go/internal/wit/imports/wasi_config_store/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_config_store/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_config_store/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_config_store/empty.s")),
    ("guest-sdk/go/internal/wit/exports/export_kcl_processor_record_processor/exports.go", include_str!("../../guest-sdk/go/internal/wit/exports/export_kcl_processor_record_processor/exports.go")),
    ("guest-sdk/go/internal/wit/exports/wit_exports/wit_exports.go", include_str!("../../guest-sdk/go/internal/wit/exports/wit_exports/wit_exports.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_checkpointer/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_checkpointer/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_checkpointer/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_checkpointer/empty.s")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_log/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_log/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_log/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_log/empty.s")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_record_processor/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_record_processor/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_record_processor/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_record_processor/empty.s")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_types/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_types/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/kcl_processor_types/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/kcl_processor_types/empty.s")),
    ("scripts/build-go.sh", include_str!("../../scripts/build-go.sh")),
    ("scripts/go-wit.sh", include_str!("../../scripts/go-wit.sh")),
    ("guest-sdk/go/wit/world.wit", include_str!("../../guest-sdk/go/wit/world.wit")),
    ("guest-sdk/go/kclhttp/transport.go", include_str!("../../guest-sdk/go/kclhttp/transport.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_http_types/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_http_types/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_http_types/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_http_types/empty.s")),
    ("guest-sdk/go/internal/wit/imports/wasi_http_outgoing_handler/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_http_outgoing_handler/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_http_outgoing_handler/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_http_outgoing_handler/empty.s")),
    ("guest-sdk/go/internal/wit/imports/wasi_io_streams/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_io_streams/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_io_streams/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_io_streams/empty.s")),
    ("guest-sdk/go/internal/wit/imports/wasi_io_poll/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_io_poll/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_io_poll/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_io_poll/empty.s")),
    ("guest-sdk/go/internal/wit/imports/wasi_io_error/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_io_error/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_io_error/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_io_error/empty.s")),
    ("guest-sdk/go/internal/wit/imports/wasi_clocks_monotonic_clock/wit_bindings.go", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_clocks_monotonic_clock/wit_bindings.go")),
    ("guest-sdk/go/internal/wit/imports/wasi_clocks_monotonic_clock/empty.s", include_str!("../../guest-sdk/go/internal/wit/imports/wasi_clocks_monotonic_clock/empty.s")),
    ("scripts/go-toolchain.sh", include_str!("../../scripts/go-toolchain.sh")),
    ("guest-sdk/python/kcl/__init__.py", include_str!("../../guest-sdk/python/kcl/__init__.py")),
    ("guest-sdk/python/README.md", include_str!("../../guest-sdk/python/README.md")),
    ("guest-sdk/python/kcl/http.py", include_str!("../../guest-sdk/python/kcl/http.py")),
    ("guest-sdk/python/kcl/state.py", include_str!("../../guest-sdk/python/kcl/state.py")),
    ("guest-sdk/python/kcl/change.py", include_str!("../../guest-sdk/python/kcl/change.py")),
    ("guest-sdk/python/kcl_component.py", include_str!("../../guest-sdk/python/kcl_component.py")),
    ("guest-sdk/python/wit/world.wit", include_str!("../../guest-sdk/python/wit/world.wit")),
    ("guest-sdk/python/wit/deps/http/http.wit", include_str!("../../guest-sdk/python/wit/deps/http/http.wit")),
    ("guest-sdk/python/wit/deps/io/io.wit", include_str!("../../guest-sdk/python/wit/deps/io/io.wit")),
    ("guest-sdk/python/wit/deps/clocks/clocks.wit", include_str!("../../guest-sdk/python/wit/deps/clocks/clocks.wit")),
    ("guest-sdk/python/wit/deps/random/random.wit", include_str!("../../guest-sdk/python/wit/deps/random/random.wit")),
    ("guest-sdk/python/wit/deps/cli/cli.wit", include_str!("../../guest-sdk/python/wit/deps/cli/cli.wit")),
    ("guest-sdk/python/wit/deps/filesystem/filesystem.wit", include_str!("../../guest-sdk/python/wit/deps/filesystem/filesystem.wit")),
    ("guest-sdk/python/wit/deps/sockets/sockets.wit", include_str!("../../guest-sdk/python/wit/deps/sockets/sockets.wit")),
    ("scripts/build-python.sh", include_str!("../../scripts/build-python.sh")),
    ("scripts/python-toolchain.sh", include_str!("../../scripts/python-toolchain.sh")),
    ("guest-sdk/js/kcl.js", include_str!("../../guest-sdk/js/kcl.js")),
    ("guest-sdk/js/component.js", include_str!("../../guest-sdk/js/component.js")),
    ("guest-sdk/js/kcl.d.ts", include_str!("../../guest-sdk/js/kcl.d.ts")),
    ("guest-sdk/js/README.md", include_str!("../../guest-sdk/js/README.md")),
    ("scripts/build-js.sh", include_str!("../../scripts/build-js.sh")),
    ("scripts/js-toolchain.sh", include_str!("../../scripts/js-toolchain.sh")),
    ("tools/js/package.json", include_str!("../../tools/js/package.json")),
    ("tools/js/package-lock.json", include_str!("../../tools/js/package-lock.json")),
];

/// Where the bundle goes, inside the project.
const BUNDLE_DIR: &str = "kcl";

/// The Rust SDK's manifest, standing alone (the checkout's inherits from its workspace).
fn rust_sdk_manifest() -> String {
    include_str!("../../guest-sdk/rust/Cargo.toml")
        // rust-version first: "version.workspace" is inside it.
        .replace("rust-version.workspace = true", &format!("rust-version = \"{}\"", env!("CARGO_PKG_RUST_VERSION")))
        .replace("version.workspace = true", &format!("version = \"{}\"", env!("CARGO_PKG_VERSION")))
        .replace("edition.workspace = true", "edition = \"2024\"")
        .replace("license.workspace = true", &format!("license = \"{}\"", env!("CARGO_PKG_LICENSE")))
        .replace("wit-bindgen.workspace = true", "wit-bindgen = \"0.61\"")
}

/// Where a project's SDK comes from.
#[derive(Clone, Copy, Debug)]
pub enum Sdk<'a> {
    /// Copied into the project's `kcl/` from this binary.
    Bundled,
    /// A kcl-host checkout, by path.
    Checkout(&'a Path),
}

/// `kcl-host init`: creates the project `dir` and prints what it wrote.
pub fn command(dir: &Path, lang: Lang, sdk: Sdk<'_>) -> Result<(), String> {
    for file in create(dir, lang, sdk).map_err(|e| e.to_string())? {
        println!("created {}", file.display());
    }
    println!("next: see {}", dir.join("README.md").display());
    Ok(())
}

/// Creates the project `dir` (its last component names it); returns the files written.
pub fn create(dir: &Path, lang: Lang, sdk: Sdk<'_>) -> Result<Vec<PathBuf>, InitError> {
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
        Lang::Python => &PYTHON,
        Lang::Js => &JS,
    };
    let sdk_path = match sdk {
        // Relative, so the project can move; `./` as Go's `replace` wants.
        Sdk::Bundled => format!("./{BUNDLE_DIR}"),
        Sdk::Checkout(root) if root.join("guest-sdk/rust/Cargo.toml").is_file() => root.display().to_string(),
        Sdk::Checkout(root) => return Err(InitError::NoSdk(root.to_path_buf())),
    };
    let crate_name = name.replace('-', "_");
    let mut written = Vec::new();
    let mut write = |file: &str, text: &str| -> Result<(), InitError> {
        let path = dir.join(file);
        let made = std::fs::create_dir_all(path.parent().expect("inside the project")).and_then(|()| std::fs::write(&path, text));
        made.map_err(|source| InitError::Write { path: path.clone(), source })?;
        written.push(path);
        Ok(())
    };
    for (file, template) in files.iter().copied().chain([("records.jsonl", RECORDS)]) {
        write(file, &template.replace("{name}", &name).replace("{crate}", &crate_name).replace("{sdk}", &sdk_path))?;
    }
    if let Sdk::Bundled = sdk {
        for (file, text) in BUNDLE {
            write(&format!("{BUNDLE_DIR}/{file}"), text)?;
        }
        write(&format!("{BUNDLE_DIR}/guest-sdk/rust/Cargo.toml"), &rust_sdk_manifest())?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sdks_and_existing_directories_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(create(&dir.path().join("9lives"), Lang::Rust, Sdk::Bundled), Err(InitError::BadName(_))));
        assert!(matches!(create(Path::new("."), Lang::Rust, Sdk::Bundled), Err(InitError::NoName(_))));
        assert!(matches!(create(&dir.path().join("p"), Lang::Rust, Sdk::Checkout(Path::new("/nonexistent"))), Err(InitError::NoSdk(_))));
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let files = create(&dir.path().join("my-proc"), Lang::Rust, Sdk::Checkout(checkout)).unwrap();
        assert_eq!(files.len(), 5, "a checkout's SDK is used where it is: the project's own files and the sample only");
        let cargo = std::fs::read_to_string(dir.path().join("my-proc/Cargo.toml")).unwrap();
        assert!(cargo.contains(r#"name = "my-proc""#) && cargo.contains(&format!(r#"path = "{}/guest-sdk/rust""#, checkout.display())), "{cargo}");
        let readme = std::fs::read_to_string(dir.path().join("my-proc/README.md")).unwrap();
        assert!(readme.contains("release/my_proc.wasm"), "{readme}");
        assert!(matches!(create(&dir.path().join("my-proc"), Lang::Go, Sdk::Bundled), Err(InitError::Exists(_))));
    }

    #[test]
    fn the_bundle_holds_every_sdk_file_and_a_manifest_of_its_own() {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut on_disk = Vec::new();
        let mut walk = vec![checkout.join("guest-sdk")];
        while let Some(dir) = walk.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.ends_with("__pycache__") {
                    // Python's byte-code cache, written by a build: not a source.
                } else if path.is_dir() {
                    walk.push(path);
                } else {
                    on_disk.push(path.strip_prefix(checkout).unwrap().display().to_string());
                }
            }
        }
        let bundled: Vec<&str> = BUNDLE.iter().map(|(file, _)| *file).chain(["guest-sdk/rust/Cargo.toml"]).collect();
        for file in &on_disk {
            assert!(bundled.contains(&file.as_str()), "{file} is not in init's BUNDLE: a project made by init would lack it");
        }
        let manifest = rust_sdk_manifest();
        assert!(!manifest.contains("workspace"), "{manifest}");
        let rust_version = format!("rust-version = \"{}\"", env!("CARGO_PKG_RUST_VERSION"));
        assert!(manifest.contains(&rust_version) && manifest.contains("\nversion = \"0."), "{manifest}");
    }
}
