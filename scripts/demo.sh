#!/usr/bin/env bash
# The seed's scenario, end to end, with no AWS account: a 1-shard stream
# with records is split in two (the parent closes), more records go to the
# children, and one `kcl-host run` worker processes all three shards — the
# parent first, then both children at once — while the processor never
# checkpoints at shard end. kcl-host writes SHARD_END itself. Then the
# processor is swapped for a new version while the worker runs (SIGHUP),
# and the records put after that are processed by the new one.
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

# Waits (up to a minute) until the log has at least $2 lines matching $1.
wait_for() {
  for _ in $(seq 1 300); do
    [ "$(grep -c -- "$1" "$log" || true)" -ge "$2" ] && return
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "kcl-host exited early" >&2; exit 1; }
    sleep 0.2
  done
  cat "$log"; echo "timed out waiting for $2 lines of '$1'" >&2; exit 1
}

step "kcl-host run counter.wasm (it never checkpoints at shard end)"
processor=$(mktemp -d)/processor.wasm
cp examples/build/counter.wasm "$processor"
# --swap-canary-batches 0: both children swap at once (by default one shard
# runs a new version for 3 batches first).
"$bin/kcl-host" run "$processor" --stream "$stream" --application "$app" \
  --worker-id demo-worker --idle-time-between-reads 200ms --swap-canary-batches 0 >"$log" 2>&1 &
pid=$!
wait_for 'kcl_host::guest: record ' 40

step "Hot swap: the tagged processor (v2) over the file, SIGHUP, 5 more records per child"
cp examples/build/tagged.wasm "$processor.new" && mv "$processor.new" "$processor"
kill -HUP "$pid"
wait_for 'swapped the processor' 2
"$bin/streamctl" put "$stream" shardId-000000000001 after-swap 5
"$bin/streamctl" put "$stream" shardId-000000000002 after-swap 5
wait_for 'kcl_host::guest: record-v2 ' 10
kill -INT "$pid"
wait "$pid"
sed -E 's/\x1b\[[0-9;]*m//g' "$log" | grep -vE 'kcl_host::guest: record' | cut -c28-

step "What each version saw, per shard (in order)"
for shard in shardId-000000000000 shardId-000000000001 shardId-000000000002; do
  for tag in record record-v2; do
    records=$(grep "kcl_host::guest: $tag " "$log" | grep "shard=\"$shard\"" \
      | sed -E "s/.*kcl_host::guest: $tag [^ ]+ [^ ]+ ([^ ]+) shard=.*/\1/" | tr '\n' ' ' || true)
    if [ -n "$records" ]; then printf '%s %-10s %s\n' "$shard" "$tag:" "$records"; fi
  done
done

step "The lease table: the parent is at SHARD_END, written by kcl-host"
"$bin/streamctl" leases "$app"
