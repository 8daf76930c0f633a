#!/usr/bin/env bash
# Sets up the MultiLangDaemon side of `cargo bench -p kcl-host --bench multilang`:
# Java KCL 2.7.2 with its multilang daemon (benches/java-kcl: classes and
# target/classpath.txt) and amazon-kclpy 3.2.0's Python package (pure Python;
# its sdist from PyPI, unpacked into benches/kclpy/target: installing it would
# fetch KCL 3.5.3's jars, which Maven Central does not serve here).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
(cd "$here/../java-kcl" && mvn -q -B -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt)
mkdir -p "$here/target"
python3 -m pip download -q --no-deps --no-binary :all: amazon-kclpy==3.2.0 -d "$here/target"
tar -xzf "$here/target/amazon_kclpy-3.2.0.tar.gz" -C "$here/target"
echo "kclpy: amazon_kclpy in $here/target/amazon_kclpy-3.2.0"
