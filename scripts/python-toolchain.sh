#!/usr/bin/env bash
# Installs, at a pinned version into tools/python/, what turns a Python
# processor into a component: componentize-py (PyPI; it bundles CPython and
# builds offline). Prints nothing but errors; safe to run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/tools/python"
COMPONENTIZE_PY_VERSION=0.25.1

if ! "$tools/venv/bin/componentize-py" --version 2>/dev/null | grep -q "^componentize-py $COMPONENTIZE_PY_VERSION$"; then
  python3 -m venv "$tools/venv" || { echo "python-toolchain: python3 could not make a virtual environment in $tools/venv (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION" \
    || { echo "python-toolchain: pip could not install componentize-py $COMPONENTIZE_PY_VERSION" >&2; exit 1; }
fi
