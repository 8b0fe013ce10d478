#!/usr/bin/env bash
# CI wrapper for the polyglot clients: builds and starts the real service on
# the embedded defaults in a temporary data directory on a free port,
# installs the Debian packages of every language named while it starts,
# waits until it is ready, runs each client against it (python: run.sh, go:
# run-go.sh, java: run-java.sh), and stops it.
# Usage: test/polyglot/ci.sh [LANG...]   (python when none is named)
# Prints "polyglot LANG: passed|failed" for each, and appends the same
# "LANG passed|failed" lines to $POLYGLOT_RESULTS when it is set (.ci/run
# counts each client as one step); exits non-zero when any failed.
# Builds unless SKIP_BUILD=1 (CI has built dist/ already).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
langs=("$@")
[ "${#langs[@]}" -gt 0 ] || langs=(python)
for lang in "${langs[@]}"; do
  case "$lang" in python | go | java) ;; *) echo "ci.sh: unknown language $lang (python, go, java)" >&2; exit 2 ;; esac
done
[ "${SKIP_BUILD:-}" = 1 ] || npm run build --silent
data="$(mktemp -d)"
port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
PORT="$port" HOST=127.0.0.1 DATA_DIR="$data" LOG_LEVEL=warn node dist/src/main.js &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data"; }
trap cleanup EXIT
# One apt-get for every language while the service starts (a failure here
# shows again in the client that needed the package).
bash test/polyglot/install.sh "${langs[@]}" || echo "could not install every Debian package"
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "the service exited before it was ready"; exit 1; }
  sleep 0.5
done
failed=0
for lang in "${langs[@]}"; do
  case "$lang" in python) script=run.sh ;; *) script="run-$lang.sh" ;; esac
  echo "--- polyglot $lang client"
  if bash "test/polyglot/$script" "127.0.0.1:$port"; then result=passed; else result=failed; failed=1; fi
  echo "polyglot $lang: $result"
  [ -z "${POLYGLOT_RESULTS:-}" ] || echo "$lang $result" >>"$POLYGLOT_RESULTS"
done
exit "$failed"
