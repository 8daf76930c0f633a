#!/usr/bin/env bash
# Turns a Python processor (a directory with app.py, whose module-level
# RecordProcessor is kcl.export(YourClass)) into a kcl-host component,
# installing the pinned componentize-py on first use:
#
#   scripts/build-python.sh examples/python/counter examples/build/py-counter.wasm
#
# The component holds CPython, the app and the SDK (guest-sdk/python: its
# kcl_component module imports the app and names the exports), and
# the app's own pure-Python dependencies when they sit in the app directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || { echo "usage: scripts/build-python.sh APP-DIR OUTPUT.wasm" >&2; exit 2; }
src=$1
[ -f "$src/app.py" ] || { echo "build-python: $src has no app.py; point at a Python processor's directory" >&2; exit 2; }
out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")

bash "$root/scripts/python-toolchain.sh"
"$root/tools/python/venv/bin/componentize-py" -d "$root/wit" -d "$root/guest-sdk/python/wit" -w kcl:python-guest/guest componentize \
  -p "$src" -p "$root/guest-sdk/python" kcl_component -o "$out" >/dev/null
echo "built $out ($(wc -c <"$out") bytes)"
