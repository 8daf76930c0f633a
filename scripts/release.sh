#!/usr/bin/env bash
# Builds kcl-host's release artifacts into dist/ (docs/RUNNING-ON-AWS.md
# says how to use them):
#   kcl-host-VERSION-ARCH-linux        static (musl), stripped binary
#   kcl-host-VERSION-ARCH-linux.debug  its debug info, split off, not shipped
#   SHA256SUMS                         sums of the binaries
# and with --image the container image kcl-host:VERSION from Containerfile
# (podman, FROM scratch).
#
#   scripts/release.sh [--arch x86_64|aarch64]... [--profile dist] [--image] [--out dist]
#
# Default: both architectures, the dist profile. Cross-compiles with zig
# (PyPI ziglang and cargo-zigbuild, installed into tools/release/venv), so a
# fresh Debian machine needs only rustup, Python and, for --image, podman. The
# aarch64 binary runs `--version` under qemu-user when qemu-aarch64-static is
# installed. The tests build the image with `--arch x86_64 --profile dev
# --image` (a debug binary: the same image, minutes instead of twenty).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

arches=() profile=dist image=false out="$root/dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arches+=("$2"); shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    --image) image=true; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "release: unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
  esac
done
[ ${#arches[@]} -gt 0 ] || arches=(x86_64 aarch64)

venv="$root/tools/release/venv" wanted="$root/tools/release/requirements.txt"
if ! cmp -s "$wanted" "$venv/installed.txt" 2>/dev/null; then
  python3 -m venv "$venv" || { echo "release: python3 could not make a virtual environment in $venv (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$wanted" || { echo "release: pip could not install $wanted" >&2; exit 1; }
  cp "$wanted" "$venv/installed.txt"
fi
export PATH="$venv/bin:$PATH"
# llvm-objcopy as rustup ships it (llvm-tools): it reads ELF of every architecture.
objcopy="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-objcopy"
[ -x "$objcopy" ] || rustup component add llvm-tools
target_dir=${CARGO_TARGET_DIR:-$root/target}
# Cargo names the dev profile's directory debug.
profile_dir=$profile; [ "$profile" = dev ] && profile_dir=debug
version=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "kcl-host"))')

mkdir -p "$out"
sums=()
for arch in "${arches[@]}"; do
  triple="$arch-unknown-linux-musl"
  rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"
  cargo zigbuild --locked --quiet --profile "$profile" --target "$triple" -p kcl-host
  name="kcl-host-$version-$arch-linux"
  built="$target_dir/$triple/$profile_dir/kcl-host"
  "$objcopy" --only-keep-debug "$built" "$out/$name.debug"
  "$objcopy" --strip-all --add-gnu-debuglink="$out/$name.debug" "$built" "$out/$name"
  sums+=("$name")
  size=$(stat -c %s "$out/$name")
  echo "release: $out/$name ($((size / 1024 / 1024)) MiB, $size bytes; debug info $(( $(stat -c %s "$out/$name.debug") / 1024 / 1024 )) MiB apart)"
  if [ "$arch" = aarch64 ]; then
    if command -v qemu-aarch64-static >/dev/null; then
      echo "release: under qemu-user: $(qemu-aarch64-static "$out/$name" --version)"
    else
      echo "release: qemu-aarch64-static is missing (Debian: qemu-user-static); the aarch64 binary was not run" >&2
    fi
  else
    echo "release: $("$out/$name" --version)"
  fi
done
(cd "$out" && sha256sum "${sums[@]}" > SHA256SUMS && cat SHA256SUMS)

if $image; then
  command -v podman >/dev/null || { echo "release: podman is missing (Debian: apt-get install podman)" >&2; exit 1; }
  [ -e "$out/kcl-host-$version-x86_64-linux" ] || { echo "release: --image takes the x86_64 binary: add --arch x86_64" >&2; exit 1; }
  context=$(mktemp -d)
  trap 'rm -rf "$context"' EXIT
  cp "$out/kcl-host-$version-x86_64-linux" "$context/kcl-host"
  mkdir "$context/cache"
  cp /etc/ssl/certs/ca-certificates.crt "$context/" || { echo "release: no CA bundle at /etc/ssl/certs (Debian: apt-get install ca-certificates)" >&2; exit 1; }
  # A build of another profile (the tests' dev) is tagged apart from the release.
  tag="kcl-host:$version"; [ "$profile" = dist ] || tag="$tag-$profile"
  podman build --quiet --file Containerfile --tag "$tag" "$context" >/dev/null
  echo "release: image $tag ($(podman image inspect --format '{{.Size}}' "$tag") bytes)"
fi
