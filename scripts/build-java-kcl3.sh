#!/usr/bin/env bash
# Builds the Java workers the mixed-fleet tests run beside kcl-host: Java KCL
# 3.5.1 (tests/java-kcl3) and the DynamoDB Streams Kinesis Adapter 2.0.1
# (tests/java-ddb-adapter): each one's classes and, in target/classpath.txt,
# the class path of its Maven dependencies. Needs Java 17+ and Maven; installs them from
# Debian packages when they are missing and this runs as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "build-java-kcl3: $*" >&2; exit 1; }

bash "$root/scripts/debian-packages.sh" build-java-kcl3 "mvn java" maven default-jdk-headless
for project in "$root/tests/java-kcl3" "$root/tests/java-ddb-adapter"; do
  (cd "$project" && mvn -q -B -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt) \
    || die "Maven could not build $project (see above)"
done
