#!/usr/bin/env bash
# The test command: builds the guests, starts the local servers, runs every
# test in the workspace against them, and stops the servers again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/build-guests.sh
bash scripts/servers.sh start
trap 'bash scripts/servers.sh stop' EXIT
# shellcheck disable=SC1091
source .servers/env
cargo test "$@"
