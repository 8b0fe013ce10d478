#!/usr/bin/env bash
# The polyglot client: proves the .proto files stand on their own for another
# language. Installs Debian's protoc, gRPC plugin and Python gRPC, generates
# Python stubs from proto/ with buf.gen.python.yaml, and runs a small Python
# client that creates, reads and queries resources over gRPC against a live
# server. run-go.sh and run-java.sh do the same in Go and Java.
# Usage: test/polyglot/run.sh HOST:PORT   (exits non-zero on any mismatch)
set -euo pipefail
target="${1:?usage: run.sh HOST:PORT}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

bash "$here/install.sh" python

# Debian's Python gRPC sits in the system interpreter's dist-packages, which
# another python3 first on PATH (pyenv, a venv) would not see.
py=/usr/bin/python3

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cd "$root"
npx buf generate --template buf.gen.python.yaml -o "$out"
# No __init__.py: the generated folders stay namespace packages, so the
# generated google/api does not hide the installed google.protobuf.

PYTHONPATH="$out/python" "$py" "$here/client.py" "$target"
