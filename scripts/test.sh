#!/usr/bin/env bash
# The test command: builds the guests and the Java KCL 3.x worker, installs
# Chromium (for the dashboard's page test) when missing, starts the
# local servers, checks the deploy recipes, builds the container image (podman),
# runs every test in the workspace against the servers, and stops them again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/build-guests.sh
bash scripts/build-java-kcl3.sh
# Chromium for the dashboard's page test (tests/acceptance/dashboard.rs).
bash scripts/debian-packages.sh test chromium chromium
bash scripts/servers.sh start --kcl3
trap 'bash scripts/servers.sh stop' EXIT
# shellcheck disable=SC1091
source .servers/env
# Compile every guest once into the tests' shared cache (a debug-built host
# takes seconds for the Go ones), so no test waits on a compile.
cargo build --quiet -p kcl-host
target=${CARGO_TARGET_DIR:-$root/target}
# Only the compile matters here: a guest that needs an output or a variable
# fails its replay once compiled.
# Two at a time: the Python and JavaScript ones are 12-19 MB of code each.
export KCL_HOST="$target/debug/kcl-host" CACHE="${TMPDIR:-/tmp}/kcl-host-test-cache"
printf '%s\0' examples/build/*.wasm | xargs -0 -P 2 -I{} sh -c \
  '"$KCL_HOST" replay "$1" --input host/templates/records.jsonl --cache-dir "$CACHE" >/dev/null 2>&1 || true' _ {}
# The deploy recipes: schemas, and arguments kcl-host accepts.
bash scripts/check-deploy.sh
# The container image, its file system exported for tests/acceptance/image.rs.
export KCL_HOST_IMAGE_FS="$target/image-fs"
bash scripts/image-fs.sh "$KCL_HOST_IMAGE_FS"
log=$(mktemp)
status=0
cargo test --no-run --quiet "$@"
# --no-fail-fast: every test binary runs even when an earlier one fails. A
# test that hangs fails the run after 50 minutes (the whole suite takes ~10),
# and cargo's output so far names it ("has been running for over 60 seconds").
timeout --kill-after=30s 50m cargo test --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# The Rust guest SDK's own tests (not a default member: its guests build for wasm32).
cargo test --no-fail-fast -p kcl-guest --features json 2>&1 | tee -a "$log" || status=$?
# One closing line for the whole run (cargo's last line is its doc-tests').
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit "$status"
