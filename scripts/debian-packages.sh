#!/usr/bin/env bash
# Installs Debian packages a script needs when one of its commands is
# missing: as root with apt-get, else says what to install and fails.
#
#   scripts/debian-packages.sh WHO "COMMAND..." PACKAGE...
#   (WHO names the caller in messages; every COMMAND must be on PATH after)
set -euo pipefail
who=$1 commands=$2
shift 2
missing=0
for command in $commands; do command -v "$command" >/dev/null || missing=1; done
[ "$missing" = 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; } \
    || { echo "$who: apt-get could not install $* (see above)" >&2; exit 1; }
else
  echo "$who: $commands needed: install them (Debian: apt-get install $*)" >&2; exit 1
fi
