#!/usr/bin/env bash
# Builds the Java KCL 3.5.1 worker the mixed-fleet test runs beside kcl-host
# (tests/java-kcl3): its classes and, in target/classpath.txt, the class path
# of its Maven dependencies. Needs Java 17+ and Maven; installs them from
# Debian packages when they are missing and this runs as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
project="$root/tests/java-kcl3"

die() { echo "build-java-kcl3: $*" >&2; exit 1; }

if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get update -qq && apt-get install -y -qq maven default-jdk-headless >/dev/null; } || die "apt-get could not install Maven and a JDK (see above)"
  else
    die "Java 17+ and Maven are needed for the Java KCL 3.x worker: install them (Debian: apt-get install maven default-jdk-headless)"
  fi
fi
(cd "$project" && mvn -q -B -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt) \
  || die "Maven could not build $project (see above)"
