#!/usr/bin/env bash
# Turns a JavaScript processor (a directory with app.js, which exports
# `recordProcessor = kcl.exportProcessor(YourClass)` and imports the SDK as
# "./kcl.js") into a kcl-host component, installing the pinned
# componentize-js on first use:
#
#   scripts/build-js.sh examples/js/counter examples/build/js-counter.wasm
#
# The component holds the SpiderMonkey engine, the app and the SDK
# (guest-sdk/js), and the app's other modules when they sit in its directory
# and are imported by relative paths. The build works on a copy of the
# directory with the SDK beside app.js; the directory itself is not touched.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || { echo "usage: scripts/build-js.sh APP-DIR OUTPUT.wasm" >&2; exit 2; }
src=$1
[ -f "$src/app.js" ] || { echo "build-js: $src has no app.js; point at a JavaScript processor's directory" >&2; exit 2; }
out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")

bash "$root/scripts/js-toolchain.sh"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -R "$src/." "$stage/"
cp "$root/guest-sdk/js/kcl.js" "$root/guest-sdk/js/component.js" "$stage/"
# component.js names the exports: the app's processor and the window export.
node "$root/tools/js/node_modules/@bytecodealliance/componentize-js/src/cli.js" \
  --wit "$root/wit" --world-name windowed-guest --disable fetch-event -o "$out" "$stage/component.js" >/dev/null
echo "built $out ($(wc -c <"$out") bytes)"
