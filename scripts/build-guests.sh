#!/usr/bin/env bash
# Builds every guest as a component into examples/build/: the Rust examples
# and test guests (wasm32-wasip2) as <name>.wasm, the Go examples (Go 1.27,
# see scripts/build-go.sh) as go-<name>.wasm, the Python examples
# (componentize-py, see scripts/build-python.sh) as py-<name>.wasm, the
# JavaScript ones (componentize-js, see scripts/build-js.sh) as js-<name>.wasm.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The wasm32-wasip2 standard library: rustup when it can download, else the
# copy bundled for rustc 1.95.0 beside this project.
sysroot=$(rustc --print sysroot)
if [ ! -d "$sysroot/lib/rustlib/wasm32-wasip2/lib" ]; then
  if [ -x ../shared/toolchain/install-wasm32-wasip2.sh ] || [ -f ../shared/toolchain/install-wasm32-wasip2.sh ]; then
    bash ../shared/toolchain/install-wasm32-wasip2.sh
  else
    rustup target add wasm32-wasip2
  fi
fi

guests=(noop counter json-aggregate enrich user-totals window-totals table-totals)
packages=()
for g in "${guests[@]}"; do packages+=(-p "kcl-example-$g"); done
packages+=(-p kcl-test-guest-faulty -p kcl-test-guest-tagged -p kcl-test-guest-forward -p kcl-test-guest-keyed)
cargo build --quiet --target wasm32-wasip2 --profile guest "${packages[@]}"

target=${CARGO_TARGET_DIR:-$root/target}
mkdir -p examples/build
for g in "${guests[@]}"; do
  cp "$target/wasm32-wasip2/guest/kcl_example_${g//-/_}.wasm" "examples/build/$g.wasm"
done
cp "$target/wasm32-wasip2/guest/kcl_test_guest_faulty.wasm" examples/build/faulty.wasm
cp "$target/wasm32-wasip2/guest/kcl_test_guest_tagged.wasm" examples/build/tagged.wasm
cp "$target/wasm32-wasip2/guest/kcl_test_guest_forward.wasm" examples/build/forward.wasm
cp "$target/wasm32-wasip2/guest/kcl_test_guest_keyed.wasm" examples/build/keyed.wasm
# Apart, and after the copies: built with the others, cargo would unify
# features and give it the JSON example's 0.2 export too; and building it
# rebuilds that example without its export (so it is copied first).
cargo build --quiet --target wasm32-wasip2 --profile guest -p kcl-test-guest-legacy -p kcl-test-guest-legacy-v0-2 -p kcl-test-guest-legacy-v0-3
cp "$target/wasm32-wasip2/guest/kcl_test_guest_legacy.wasm" examples/build/legacy-v0.1.wasm
cp "$target/wasm32-wasip2/guest/kcl_test_guest_legacy_v0_2.wasm" examples/build/legacy-v0.2.wasm
cp "$target/wasm32-wasip2/guest/kcl_test_guest_legacy_v0_3.wasm" examples/build/legacy-v0.3.wasm
for g in counter json-aggregate enrich totals window-totals table-totals; do
  bash scripts/build-go.sh "examples/go/$g" "examples/build/go-$g.wasm" >/dev/null
done
for g in counter json-aggregate enrich user-totals window-totals table-totals; do
  bash scripts/build-python.sh "examples/python/$g" "examples/build/py-$g.wasm" >/dev/null
done
bash scripts/build-python.sh tests/python/faulty examples/build/py-faulty.wasm >/dev/null
for g in counter json-aggregate enrich user-totals window-totals table-totals; do
  bash scripts/build-js.sh "examples/js/$g" "examples/build/js-$g.wasm" >/dev/null
done
bash scripts/build-js.sh tests/js/faulty examples/build/js-faulty.wasm >/dev/null
# Stamp each Rust guest with its package's name and version, as any
# processor's build can (`wasm-tools metadata add`): kcl-host shows them
# beside the hash in its logs, metrics and exit line.
wasm_tools="$root/tools/go/venv/bin/wasm-tools"  # installed by build-go.sh
stamp() {
  local id  # path+file:///...#[name@]version
  id=$(cargo pkgid --quiet -p "$1")
  id=${id##*#}
  "$wasm_tools" metadata add --name "$1" --version "${id##*@}" "$2" -o "$2"
}
for g in "${guests[@]}"; do stamp "kcl-example-$g" "examples/build/$g.wasm"; done
for g in faulty tagged forward; do stamp "kcl-test-guest-$g" "examples/build/$g.wasm"; done
stamp kcl-test-guest-legacy examples/build/legacy-v0.1.wasm
# The same forward processor as a version 2.0.0 (another hash): the output swap test's new version.
"$wasm_tools" metadata add --name kcl-test-guest-forward --version 2.0.0 examples/build/forward.wasm -o examples/build/forward-v2.wasm
echo "guests built: $(cd examples/build && ls *.wasm | tr '\n' ' ')"
