#!/usr/bin/env bash
# Regenerates the Go SDK's bindings (guest-sdk/go/internal/wit) from wit/
# after a WIT change. The export package's hand-written exports.go is kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/go-toolchain.sh" --bindgen
out="$root/guest-sdk/go/internal/wit"
find "$out" -name wit_bindings.go -delete
find "$out" -name empty.s -delete
rm -f "$out/exports/wit_exports/wit_exports.go"
wit=$(mktemp -d)
trap 'rm -rf "$wit"' EXIT
bash "$root/scripts/go-wit.sh" "$wit"
PATH="$root/tools/go/venv/bin:$PATH" "$root/tools/go/bin/wit-bindgen" go --world kcl:go-guest/guest \
  --pkg-name kclhost.dev/kcl/internal/wit --out-dir "$out" --quiet "$wit"
