//! Names the commit the binary is built from, for `kcl-host --version`:
//! `KCL_HOST_COMMIT` when set (a release built outside a checkout), else
//! git's short hash, with `-dirty` for uncommitted changes.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=KCL_HOST_COMMIT");
    // Read when the script runs, not when it was compiled: one compiled
    // script may serve checkouts in other directories (a shared target).
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).current_dir(&manifest_dir).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = std::env::var("KCL_HOST_COMMIT").ok().or_else(|| {
        // Build again when HEAD moves (a checkout), its branch moves (a
        // commit), or the index changes (dirty or not).
        if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
            println!("cargo:rerun-if-changed={dir}/HEAD");
            println!("cargo:rerun-if-changed={dir}/index");
            if let (Some(common), Some(branch)) = (git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]), git(&["symbolic-ref", "-q", "HEAD"])) {
                println!("cargo:rerun-if-changed={common}/{branch}");
            }
        }
        let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        Some(if dirty { format!("{hash}-dirty") } else { hash })
    });
    println!("cargo:rustc-env=KCL_HOST_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));
}
