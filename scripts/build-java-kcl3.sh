#!/usr/bin/env bash
# Builds the Java KCL 3.5.1 worker the mixed-fleet test runs beside kcl-host
# (tests/java-kcl3): its classes and, in target/classpath.txt, the class path
# of its Maven dependencies. Needs Java 17+ and Maven; installs them from
# Debian packages when they are missing and this runs as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
project="$root/tests/java-kcl3"

die() { echo "build-java-kcl3: $*" >&2; exit 1; }

bash "$root/scripts/debian-packages.sh" build-java-kcl3 "mvn java" maven default-jdk-headless
(cd "$project" && mvn -q -B -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt) \
  || die "Maven could not build $project (see above)"
