#!/usr/bin/env bash
# Installs, at the versions pinned in tools/js/package-lock.json, what turns a
# JavaScript processor into a component: componentize-js (npm; it bundles the
# SpiderMonkey engine and builds offline). Prints nothing but errors; safe to
# run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/tools/js"
COMPONENTIZE_JS_VERSION=0.23.0

installed="$tools/node_modules/@bytecodealliance/componentize-js/package.json"
if ! grep -q "\"version\": \"$COMPONENTIZE_JS_VERSION\"" "$installed" 2>/dev/null; then
  command -v npm >/dev/null || { echo "js-toolchain: npm is not installed; install Node.js (20 or newer) and npm" >&2; exit 1; }
  (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error) \
    || { echo "js-toolchain: npm could not install componentize-js $COMPONENTIZE_JS_VERSION (see above)" >&2; exit 1; }
fi
