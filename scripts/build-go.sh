#!/usr/bin/env bash
# Turns a Go processor (a main package using kclhost.dev/kcl) into a
# kcl-host component, installing the pinned tools on first use:
#
#   scripts/build-go.sh examples/go/counter examples/build/go-counter.wasm
#
# Steps: go build for wasip1 as a c-shared reactor -> embed the
# SDK's world (scripts/go-wit.sh: the contract plus wasi:http) ->
# componentize with the WASI reactor adapter.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || { echo "usage: scripts/build-go.sh PACKAGE-DIR OUTPUT.wasm" >&2; exit 2; }
src=$1
out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ -f "$src/go.mod" ] || { echo "build-go: $src has no go.mod; point at a Go processor's module" >&2; exit 2; }

bash "$root/scripts/go-toolchain.sh"
tools="$root/tools/go"
# The processor's own dependencies (e.g. easyjson's runtime) come from the Go
# module proxy on first use, then from the module cache.
export PATH="$tools/venv/bin:$PATH" GOTOOLCHAIN=local GOFLAGS=-mod=mod
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$src" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -ldflags=-checklinkname=0 -o "$work/core.wasm" .)
bash "$root/scripts/go-wit.sh" "$work/wit"
wasm-tools component embed "$work/wit" --world kcl:go-guest/guest "$work/core.wasm" -o "$work/embedded.wasm"
wasm-tools component new "$work/embedded.wasm" \
  --adapt "wasi_snapshot_preview1=$tools/bin/wasi_snapshot_preview1.reactor.wasm" -o "$out"
echo "built $out ($(wc -c <"$out") bytes)"
