#!/usr/bin/env bash
# For the image test (tests/acceptance/image.rs): builds the container image
# from Containerfile with a debug binary (scripts/release.sh --arch x86_64
# --profile dev --image: the same image as a release, minutes instead of
# twenty) and exports its file system into DIR, since these machines refuse
# `podman run`; the test runs the image's kcl-host there with chroot.
#
#   scripts/image-fs.sh DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: scripts/image-fs.sh DIR}
# podman from Debian's packages when missing (as root), as the Java tools are.
bash "$root/scripts/debian-packages.sh" image-fs podman podman
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bash "$root/scripts/release.sh" --arch x86_64 --profile dev --image --out "$out" >&2
version=$(ls "$out" | sed -n 's/^kcl-host-\(.*\)-x86_64-linux$/\1/p')
container=$(podman create "kcl-host:$version-dev")
rm -rf "$dir" && mkdir -p "$dir"
podman export "$container" | tar -x -C "$dir"
podman rm --force "$container" >/dev/null
echo "image-fs: kcl-host:$version-dev exported to $dir" >&2
