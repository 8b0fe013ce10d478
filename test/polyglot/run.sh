#!/usr/bin/env bash
# The polyglot client: proves the .proto files stand on their own for another
# language. Installs Debian's protoc, gRPC plugin and Python gRPC, generates
# Python stubs from proto/, and runs a small Python client that creates,
# reads and queries resources over gRPC against a live server.
# Usage: test/polyglot/run.sh HOST:PORT   (exits non-zero on any mismatch)
set -euo pipefail
target="${1:?usage: run.sh HOST:PORT}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v grpc_python_plugin >/dev/null || need+=(protobuf-compiler-grpc)
/usr/bin/python3 -c 'import grpc' 2>/dev/null || need+=(python3-grpcio)
/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || need+=(python3-protobuf)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing ${need[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Debian's Python gRPC sits in the system interpreter's dist-packages, which
# another python3 first on PATH (pyenv, a venv) would not see.
py=/usr/bin/python3

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cd "$root/proto"
protos=$(find resourcestore google -name '*.proto' | sort)
protoc -I . --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" $protos
# No __init__.py: the generated folders stay namespace packages, so the
# generated google/api does not hide the installed google.protobuf.

PYTHONPATH="$out" "$py" "$here/client.py" "$target"
