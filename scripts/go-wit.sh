#!/usr/bin/env bash
# Assembles into OUT the WIT the Go SDK builds against: its world
# (guest-sdk/go/wit/world.wit: the contract's guest world plus
# wasi:http/outgoing-handler), with the contract (wit/) and WASI 0.2.12 as
# wasmtime 48 implements it (the files guest-sdk/python/wit/deps holds) as
# its deps/. Used by build-go.sh and go-bindings.sh.
#
#   scripts/go-wit.sh OUT
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 1 ] || { echo "usage: scripts/go-wit.sh OUT" >&2; exit 2; }
out=$1
mkdir -p "$out/deps/processor"
cp "$root/guest-sdk/go/wit/world.wit" "$out/"
cp "$root"/wit/*.wit "$out/deps/processor/"
cp -r "$root/wit/deps/config" "$root"/guest-sdk/python/wit/deps/* "$out/deps/"
