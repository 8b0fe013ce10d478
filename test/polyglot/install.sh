#!/usr/bin/env bash
# Installs Debian's packages for the polyglot clients of the languages named
# (python, go, java), in one apt-get call and only those not installed yet.
# Usage: test/polyglot/install.sh LANG...
# No other registry is used: Go builds in GOPATH mode against Debian's
# /usr/share/gocode, Java against the jars in /usr/share/java.
set -euo pipefail
pkgs=(protobuf-compiler)
for lang in "$@"; do
  case "$lang" in
    python) pkgs+=(protobuf-compiler-grpc python3-grpcio python3-protobuf) ;;
    # protoc-gen-go and protoc-gen-go-grpc, not golang-goprotobuf-dev's older
    # plugin (it cannot build proto3 optional fields); golang/protobuf 1.5
    # (on top of google.golang.org/protobuf) rather than 1.3, so grpc-go
    # encodes the new plugin's messages.
    go) pkgs+=(golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-google-protobuf-dev
               golang-github-golang-protobuf-1-5-dev golang-google-genproto-dev) ;;
    # libgrpc-java does not depend on what it needs at run time (netty,
    # guava, perfmark, gson); grpc_java_plugin writes
    # @javax.annotation.Generated, which geronimo-annotation carries.
    java) pkgs+=(default-jdk-headless protobuf-compiler-grpc-java-plugin libprotobuf-java libgrpc-java libnetty-java
                 libguava-java libperfmark-java libgoogle-gson-java libgeronimo-annotation-1.3-spec-java) ;;
    *) echo "install.sh: unknown language $lang (python, go, java)" >&2; exit 2 ;;
  esac
done
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ "${#need[@]}" -eq 0 ] && exit 0
echo "installing ${need[*]}"
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
