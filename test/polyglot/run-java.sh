#!/usr/bin/env bash
# The Java client: generates Java stubs from proto/ with buf.gen.java.yaml
# (Debian's protoc and grpc_java_plugin), compiles java/Client.java against
# Debian's grpc-java and protobuf-java jars (no Maven repository), and runs it
# against a live server.
# Usage: test/polyglot/run-java.sh HOST:PORT   (exits non-zero on any mismatch)
set -euo pipefail
target="${1:?usage: run-java.sh HOST:PORT}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bash "$here/install.sh" java

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$root"
npx buf generate --template buf.gen.java.yaml -o "$work"
# Debian's jars by their unversioned names: libprotobuf-java, libgrpc-java
# and what grpc-java needs at run time.
jars=(protobuf grpc-api grpc-context grpc-core grpc-stub grpc-protobuf grpc-protobuf-lite grpc-netty
  guava perfmark-api gson geronimo-annotation-1.3-spec
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-common netty-handler netty-resolver netty-transport)
classpath=""
for jar in "${jars[@]}"; do
  [ -f "/usr/share/java/$jar.jar" ] || { echo "missing /usr/share/java/$jar.jar"; exit 1; }
  classpath="$classpath/usr/share/java/$jar.jar:"
done
# -sourcepath: javac compiles only the generated classes the client uses.
mkdir -p "$work/classes"
javac -nowarn -encoding UTF-8 -d "$work/classes" -cp "$classpath" -sourcepath "$work/java" "$here/java/Client.java"
java -cp "$work/classes:$classpath" Client "$target"
