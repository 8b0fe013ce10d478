#!/usr/bin/env bash
# The Go client: generates Go stubs from proto/ with buf.gen.go.yaml (Debian's
# protoc-gen-go and protoc-gen-go-grpc), builds go/main.go in GOPATH mode
# against Debian's grpc-go in /usr/share/gocode (no module proxy, no
# download), and runs it against a live server.
# Usage: test/polyglot/run-go.sh HOST:PORT   (exits non-zero on any mismatch)
set -euo pipefail
target="${1:?usage: run-go.sh HOST:PORT}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bash "$here/install.sh" go

# Everything (sources, build cache) in one temporary GOPATH, removed at exit.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$root"
npx buf generate --template buf.gen.go.yaml -o "$work"
mkdir -p "$work/src/polyglotclient"
cp "$here/go/main.go" "$work/src/polyglotclient/"
cd "$work/src/polyglotclient"
GO111MODULE=off GOPATH="$work:/usr/share/gocode" GOCACHE="$work/cache" GOPROXY=off GOFLAGS= \
  go build -o "$work/client" .
"$work/client" "$target"
