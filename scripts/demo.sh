#!/usr/bin/env bash
# The seed's scenario, end to end, with no AWS account: a 1-shard stream
# with records is split in two (the parent closes), more records go to the
# children, and one `kcl-host run` worker processes all three shards — the
# parent first, then both children at once — while the processor never
# checkpoints at shard end. kcl-host writes SHARD_END itself.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Building kcl-host, the demo tool and the example processors"
cargo build --quiet -p kcl-host -p kcl-testkit
bash scripts/build-guests.sh
bin="$CARGO_TARGET_DIR/debug"

step "Starting local Kinesis (kinesis-local) and DynamoDB (dynalite)"
bash scripts/servers.sh start
log=$(mktemp)
trap 'bash scripts/servers.sh stop; rm -f "$log"' EXIT
# shellcheck disable=SC1091
source .servers/env

stream=demo-orders-$$
app=demo-app-$$
step "A 1-shard stream with 20 records, then split into 2 (the seed's reshard)"
"$bin/streamctl" create "$stream" 1
"$bin/streamctl" put "$stream" shardId-000000000000 parent 20
"$bin/streamctl" split "$stream" shardId-000000000000
"$bin/streamctl" put "$stream" shardId-000000000001 left 10
"$bin/streamctl" put "$stream" shardId-000000000002 right 10
"$bin/streamctl" shards "$stream"

step "kcl-host run counter.wasm (it never checkpoints in shutdown)"
"$bin/kcl-host" run examples/build/counter.wasm --stream "$stream" --application "$app" \
  --worker-id demo-worker --idle-time-between-reads 200ms >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ "$(grep -c 'kcl_host::guest: record ' "$log" || true)" -ge 40 ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "kcl-host exited early" >&2; exit 1; }
  sleep 0.2
done
kill -INT "$pid"
wait "$pid"
sed -E 's/\x1b\[[0-9;]*m//g' "$log" | grep -vE 'kcl_host::guest: record ' | cut -c28-

step "What the processor saw, per shard (in order)"
for shard in shardId-000000000000 shardId-000000000001 shardId-000000000002; do
  records=$(grep "kcl_host::guest: record " "$log" | grep "shard=\"$shard\"" | awk '{print $6}' | tr '\n' ' ')
  printf '%s: %s\n' "$shard" "$records"
done

step "The lease table: the parent is at SHARD_END, written by kcl-host"
"$bin/streamctl" leases "$app"
