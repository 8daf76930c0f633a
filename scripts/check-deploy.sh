#!/usr/bin/env bash
# Checks the deploy recipes under deploy/ (tools/deploy/check.py says how):
# installs its tools (PyPI kubernetes-validate and botocore) into
# tools/deploy/venv on first use, builds kcl-host, and runs the checks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/tools/deploy/venv" wanted="$root/tools/deploy/requirements.txt"
if ! cmp -s "$wanted" "$venv/installed.txt" 2>/dev/null; then
  python3 -m venv "$venv" || { echo "check-deploy: python3 could not make a virtual environment in $venv (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$wanted" || { echo "check-deploy: pip could not install $wanted" >&2; exit 1; }
  cp "$wanted" "$venv/installed.txt"
fi
command -v systemd-analyze >/dev/null || { echo "check-deploy: systemd-analyze is missing (Debian: apt-get install systemd)" >&2; exit 1; }
cargo build --quiet -p kcl-host
target=${CARGO_TARGET_DIR:-$root/target}
PATH="$venv/bin:$PATH" "$venv/bin/python" "$root/tools/deploy/check.py" "$target/debug/kcl-host"
