#!/usr/bin/env bash
# Local Kinesis (npm kinesis-local) and DynamoDB (npm dynalite) servers on
# 127.0.0.1, for the tests and the demo. No AWS account needed.
#
#   scripts/servers.sh start   install if needed, start both, wait until each
#                              answers an API call, write .servers/env
#   scripts/servers.sh start --kcl3
#                              also a second DynamoDB (PyPI moto) that Java
#                              KCL 3.x can use, for the mixed-fleet test
#                              (its endpoint: KCL3_DYNAMODB_ENDPOINT), and
#                              DynamoDB Streams (AWS_ENDPOINT_URL_DYNAMODB_STREAMS)
#   scripts/servers.sh stop    stop what `start` started (by PID)
#   scripts/servers.sh env     print the variables that point clients at them
#
# Ports: free ones are picked unless KINESIS_PORT / DYNAMODB_PORT are set;
# a port that is taken is named and nothing is left running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg="$root/tools/servers"
state="$root/.servers"

die() { echo "servers: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

port_taken() {
  python3 - "$1" <<'PY'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)
PY
}

install() {
  if [ ! -d "$pkg/node_modules/kinesis-local" ] || [ ! -d "$pkg/node_modules/dynalite" ]; then
    command -v npm >/dev/null || die "npm is not installed; install Node.js (20 or newer) and npm"
    (cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error) || die "npm could not install kinesis-local and dynalite (see above)"
  fi
}

# A signed-looking request: the servers accept any credentials (moto picks
# the service by the credential's scope: kinesis or dynamodb).
api_call() { # url target content-type
  local service
  service=$(echo "${2%%_*}" | tr '[:upper:]' '[:lower:]')
  curl -sf -m 2 -X POST "$1" -H "X-Amz-Target: $2" -H "Content-Type: $3" \
    -H "X-Amz-Date: 20260101T000000Z" \
    -H "Authorization: AWS4-HMAC-SHA256 Credential=AKIDLOCAL/20260101/us-east-1/$service/aws4_request, SignedHeaders=host;x-amz-date, Signature=00" \
    -d '{}' >/dev/null 2>&1
}

wait_ready() { # name pid url target content-type
  for _ in $(seq 1 300); do
    kill -0 "$2" 2>/dev/null || { tail -20 "$state/$1.log" >&2; return 1; }
    api_call "$3" "$4" "$5" && return 0
    sleep 0.1
  done
  echo "servers: $1 did not answer at $3 within 30 s" >&2
  return 1
}

install_moto() {
  local venv="$root/tools/moto/venv" wanted="$root/tools/moto/requirements.txt"
  if ! cmp -s "$wanted" "$venv/installed.txt" 2>/dev/null; then
    python3 -m venv "$venv" || die "python3 could not make a virtual environment in $venv (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$wanted" || die "pip could not install moto (see above)"
    cp "$wanted" "$venv/installed.txt"
  fi
}

stop() {
  for name in kinesis dynamodb kcl3-dynamodb; do
    if [ -f "$state/$name.pid" ]; then
      kill -9 "$(cat "$state/$name.pid")" 2>/dev/null || true
      rm -f "$state/$name.pid"
    fi
  done
  rm -f "$state/env"
}

start() {
  local kcl3=${1:-}
  [ -z "$kcl3" ] || [ "$kcl3" = --kcl3 ] || die "usage: scripts/servers.sh start [--kcl3]"
  install
  [ -z "$kcl3" ] || install_moto
  mkdir -p "$state"
  stop
  local kport=${KINESIS_PORT:-$(free_port)} dport=${DYNAMODB_PORT:-$(free_port)} tport
  tport=$(free_port)
  port_taken "$kport" && die "port $kport for Kinesis is taken; set KINESIS_PORT to a free port"
  port_taken "$dport" && die "port $dport for DynamoDB is taken; set DYNAMODB_PORT to a free port"

  # kinesis-local crashes without a certificate path, even on its plain port;
  # its default limit of 50 shards per account is too small for a test run.
  KINESIS_MOCK_PLAIN_PORT=$kport KINESIS_MOCK_TLS_PORT=$tport \
  KINESIS_MOCK_CERT_PATH="$pkg/node_modules/kinesis-local/server.json" \
  CREATE_STREAM_DURATION=10ms DELETE_STREAM_DURATION=10ms SPLIT_SHARD_DURATION=10ms \
  MERGE_SHARDS_DURATION=10ms UPDATE_SHARD_COUNT_DURATION=10ms LOG_LEVEL=WARN SHARD_LIMIT=100000 \
    setsid node "$pkg/node_modules/kinesis-local/main.js" >"$state/kinesis.log" 2>&1 &
  echo $! >"$state/kinesis.pid"
  setsid node "$pkg/node_modules/dynalite/cli.js" --host 127.0.0.1 --port "$dport" \
    --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 >"$state/dynamodb.log" 2>&1 &
  echo $! >"$state/dynamodb.pid"

  if ! wait_ready kinesis "$(cat "$state/kinesis.pid")" "http://127.0.0.1:$kport/" \
        Kinesis_20131202.ListStreams application/x-amz-json-1.1; then
    stop; die "kinesis-local did not start on port $kport (log above)"
  fi
  if ! wait_ready dynamodb "$(cat "$state/dynamodb.pid")" "http://127.0.0.1:$dport/" \
        DynamoDB_20120810.ListTables application/x-amz-json-1.0; then
    stop; die "dynalite did not start on port $dport (log above)"
  fi
  cat >"$state/env" <<ENV
export AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:$kport
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$dport
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=AKIDLOCAL
export AWS_SECRET_ACCESS_KEY=local
ENV
  if [ -n "$kcl3" ]; then
    local mport
    mport=$(free_port)
    # One request at a time (tests/kit/moto_serial.py): moto's threaded
    # server does not isolate TransactWriteItems from other requests.
    MOTO_PORT=$mport setsid "$root/tools/moto/venv/bin/python" "$root/tests/kit/moto_serial.py" 127.0.0.1 "$mport" >"$state/kcl3-dynamodb.log" 2>&1 &
    echo $! >"$state/kcl3-dynamodb.pid"
    if ! wait_ready kcl3-dynamodb "$(cat "$state/kcl3-dynamodb.pid")" "http://127.0.0.1:$mport/" \
          DynamoDB_20120810.ListTables application/x-amz-json-1.0; then
      stop; die "moto did not start on port $mport (log above)"
    fi
    echo "export KCL3_DYNAMODB_ENDPOINT=http://127.0.0.1:$mport" >>"$state/env"
    # moto serves DynamoDB Streams too (dynalite does not): a table made on
    # it with a stream is read through this endpoint.
    echo "export AWS_ENDPOINT_URL_DYNAMODB_STREAMS=http://127.0.0.1:$mport" >>"$state/env"
    echo "servers: DynamoDB for Java KCL 3.x (moto) on 127.0.0.1:$mport" >&2
  fi
  echo "servers: Kinesis on 127.0.0.1:$kport, DynamoDB on 127.0.0.1:$dport (variables in .servers/env)" >&2
}

case "${1:-}" in
  start) start "${2:-}" ;;
  stop) stop ;;
  env) cat "$state/env" ;;
  *) die "usage: scripts/servers.sh start [--kcl3]|stop|env" ;;
esac
