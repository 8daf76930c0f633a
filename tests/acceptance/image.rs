//! The container image (Containerfile, built by `scripts/image-fs.sh`,
//! which `scripts/test.sh` runs): its kcl-host, run from the image's
//! exported file system with chroot as the image's non-root user, processes
//! the seed's reshard against the local servers.

use std::path::PathBuf;

use super::lifecycle::seed_scenario_run;
use super::*;

/// The image's exported file system.
fn image_fs() -> PathBuf {
    let dir = std::env::var("KCL_HOST_IMAGE_FS")
        .unwrap_or_else(|_| panic!("KCL_HOST_IMAGE_FS is not set: run `scripts/image-fs.sh DIR` (scripts/test.sh does) and set it to DIR"));
    PathBuf::from(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_kcl_host_processes_the_seeds_reshard_as_its_non_root_user() {
    // A copy of the export for each run: the run adds the processor and compiled code.
    let fs = std::env::temp_dir().join(unique("image-fs"));
    let copied = std::process::Command::new("cp").arg("-a").arg(image_fs()).arg(&fs).status().unwrap();
    assert!(copied.success(), "copying the image's file system");
    let entries: Vec<String> = walk(&fs).into_iter().map(|p| p.strip_prefix(&fs).unwrap().display().to_string()).collect();
    assert_eq!(
        entries,
        ["etc/ssl/certs/ca-certificates.crt", "usr/local/bin/kcl-host", "var/cache/kcl-host"],
        "the binary, CA certificates and the cache volume: no shell, no package manager"
    );
    // The processor goes where a volume would put it.
    std::fs::create_dir_all(fs.join("processors")).unwrap();
    std::fs::copy(kcl_testkit::guest("counter"), fs.join("processors/counter.wasm")).unwrap();
    let fs = fs.display().to_string();
    seed_scenario_run(true, |stream, application| {
        let args = [
            "--userspec=65532:65532", &fs, "/usr/local/bin/kcl-host", "run", "/processors/counter.wasm", "--stream", stream,
            "--application", application, "--worker-id", "worker-1", "--idle-time-between-reads", "200ms",
            "--cache-dir", "/var/cache/kcl-host",
        ];
        KclHost::spawn("/usr/sbin/chroot".as_ref(), &args)
    })
    .await;
    std::fs::remove_dir_all(&fs).unwrap();
}

/// Every file and every empty directory under `dir`, sorted.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    if entries.is_empty() {
        found.push(dir.to_owned());
    }
    for path in entries {
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
