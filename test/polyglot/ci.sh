#!/usr/bin/env bash
# CI wrapper for the polyglot client: builds and starts the real service on
# the embedded defaults in a temporary data directory on a free port, waits
# until it is ready, runs run.sh against it, and stops it.
# Builds unless SKIP_BUILD=1 (CI has built dist/ already).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
[ "${SKIP_BUILD:-}" = 1 ] || npm run build --silent
data="$(mktemp -d)"
port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
PORT="$port" HOST=127.0.0.1 DATA_DIR="$data" LOG_LEVEL=warn node dist/src/main.js &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data"; }
trap cleanup EXIT
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "the service exited before it was ready"; exit 1; }
  sleep 0.5
done
bash test/polyglot/run.sh "127.0.0.1:$port"
