#!/usr/bin/env bash
# `buf curl` (the project's devDependency) against the built service, the way
# a gRPC user explores it: the schema comes from server reflection only.
# Two rounds, auth off and auth on (a read token for reflection and reads, a
# write token to make the data); in each, over --protocol grpc, grpcweb and
# connect: --list-services, --list-methods, a Read, a Query and the
# server-streaming QueryParquet, each answer checked. Also v1alpha reflection,
# and with auth on, that a call without a token is refused.
# Builds unless SKIP_BUILD=1. Exits non-zero on any mismatch.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
[ "${SKIP_BUILD:-}" = 1 ] || npm run build --silent
buf="$root/node_modules/.bin/buf"

if ! command -v jq >/dev/null; then
  echo "installing jq"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq jq >/dev/null
fi

failures=0
pid=""
data=""
stop() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -z "$data" ] || rm -rf "$data"
  pid=""
  data=""
}
trap stop EXIT

ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; failures=$((failures + 1)); }

# start [API_TOKENS]: the built service on a free port in a fresh data directory.
start() {
  data="$(mktemp -d)"
  port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
  url="http://127.0.0.1:$port"
  PORT="$port" HOST=127.0.0.1 DATA_DIR="$data" LOG_LEVEL=warn API_TOKENS="${1:-}" node dist/src/main.js &
  pid=$!
  for _ in $(seq 1 120); do
    curl -fsS "$url/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "the service exited before it was ready"; exit 1; }
    sleep 0.5
  done
  echo "the service was not ready in time"
  exit 1
}

# call TOKEN PROTOCOL ARGS...: buf curl by reflection, the token (if any) sent
# with the call and with the reflection requests. Prints the answer; the exit
# status is buf's.
call() {
  local token="$1" protocol="$2"
  shift 2
  local auth=()
  [ -z "$token" ] || auth=(-H "authorization: Bearer $token" --reflect-header "authorization: Bearer $token")
  # A server that waits for the end of the reflection stream would hang buf
  # (a bug once seen): --timeout turns that into a failure.
  "$buf" curl --timeout 30s --http2-prior-knowledge --protocol "$protocol" "${auth[@]}" "$@" 2>&1
}

# expect WHAT OUTPUT JQ_FILTER: the output (one or more JSON messages) passes the filter.
expect() {
  if printf '%s' "$2" | jq -e -s "$3" >/dev/null 2>&1; then ok "$1"; else bad "$1"; printf '%s\n' "$2" | head -c 2000; echo; fi
}

# expect_lines WHAT OUTPUT LINE...: each line is in the output.
expect_lines() {
  local what="$1" out="$2" missing=""
  shift 2
  for line in "$@"; do grep -qxF "$line" <<<"$out" || missing="$missing $line"; done
  if [ -z "$missing" ]; then ok "$what"; else bad "$what: missing$missing"; printf '%s\n' "$out" | head -40; fi
}

round() {
  local label="$1" reader="$2" writer="$3"
  local run ds st
  run="$(node -e 'console.log(require("crypto").randomBytes(4).toString("hex"))')"
  ds="bc-ds-$run"
  st="bc-st-$run"
  echo "--- $label"
  out="$(call "$writer" grpc -d "{\"resources\":[{\"identifier\":\"$ds\",\"datasource\":{\"name\":\"buf curl\",\"country\":\"NL\"}},{\"identifier\":\"$st\",\"parent_identifier\":\"$ds\",\"study\":{\"modality\":\"CT\",\"study_date\":\"2024-02-29\"}}]}" "$url/resourcestore.v2.ResourceService/Create" || true)"
  expect "$label: Create makes the data" "$out" '.[0].created == "2"'

  for protocol in grpc grpcweb connect; do
    local p="$label, $protocol"
    out="$(call "$reader" "$protocol" --list-services "$url" || true)"
    local before=$failures
    expect_lines "$p: --list-services" "$out" \
      resourcestore.v2.ResourceService resourcestore.v2.QueryService resourcestore.v1.ResourceService \
      grpc.health.v1.Health grpc.reflection.v1.ServerReflection grpc.reflection.v1alpha.ServerReflection
    # Without reflection every other call would fail too, each after the timeout.
    if [ "$failures" -gt "$before" ]; then bad "$p: the other calls were not tried"; continue; fi
    out="$(call "$reader" "$protocol" --list-methods "$url" || true)"
    expect_lines "$p: --list-methods" "$out" \
      resourcestore.v2.ResourceService/Read resourcestore.v2.QueryService/Query resourcestore.v2.QueryService/QueryParquet
    out="$(call "$reader" "$protocol" -d "{\"identifiers\":[\"$st\",\"$ds\"]}" "$url/resourcestore.v2.ResourceService/Read" || true)"
    expect "$p: Read" "$out" \
      "(.[0].resources | map(.identifier)) == [\"$st\", \"$ds\"] and .[0].resources[0].study.modality == \"CT\" and .[0].resources[0].parentIdentifier == \"$ds\""
    out="$(call "$reader" "$protocol" -d "{\"payload_type\":\"study\",\"parent_identifier\":\"$ds\",\"filters\":[{\"field\":\"modality\",\"op\":\"eq\",\"value\":\"CT\"}]}" "$url/resourcestore.v2.QueryService/Query" || true)"
    expect "$p: Query" "$out" "(.[0].results | map(.identifier)) == [\"$st\"]"
    out="$(call "$reader" "$protocol" -d "{\"payload_type\":\"study\",\"parent_identifier\":\"$ds\"}" "$url/resourcestore.v2.QueryService/QueryParquet" || true)"
    # One Parquet file across the streamed messages: PAR1 at both ends.
    expect "$p: QueryParquet streams a Parquet file" "$out" \
      'length >= 1 and all(.[]; .contentType == "application/octet-stream") and ((map(.data) | map(@base64d) | add) as $f | ($f | startswith("PAR1")) and ($f | endswith("PAR1")))'
  done

  out="$(call "$reader" grpc --reflect-protocol grpc-v1alpha --list-services "$url" || true)"
  expect_lines "$label: --list-services by grpc.reflection.v1alpha" "$out" resourcestore.v2.ResourceService
  out="$(call "$reader" connect --reflect-protocol grpc-v1alpha -d "{\"identifiers\":[\"$st\"]}" "$url/resourcestore.v2.ResourceService/Read" || true)"
  expect "$label: Read by grpc.reflection.v1alpha" "$out" ".[0].resources[0].identifier == \"$st\""
}

start ""
round "auth off" "" ""
stop

read_token="bc-read-$(node -e 'console.log(require("crypto").randomBytes(12).toString("hex"))')"
write_token="bc-write-$(node -e 'console.log(require("crypto").randomBytes(12).toString("hex"))')"
start "$read_token=read;$write_token=write"
round "auth on" "$read_token" "$write_token"
# Without a token reflection itself is refused (it needs the read scope).
if out="$(call "" grpc --list-services "$url")"; then
  bad "auth on: --list-services without a token was answered"
else
  if grep -q "grpc.reflection" <<<"$out"; then bad "auth on: --list-services without a token listed services"; else ok "auth on: --list-services without a token is refused"; fi
fi
out="$(call "" connect --schema proto -d '{"identifiers":["x"]}' "$url/resourcestore.v2.ResourceService/Read" || true)"
expect "auth on: Read without a token is unauthenticated" "$out" '.[0].code == "unauthenticated"'
stop

if [ "$failures" -gt 0 ]; then
  echo "buf curl: $failures check(s) failed"
  exit 1
fi
echo "buf curl: every check passed"
