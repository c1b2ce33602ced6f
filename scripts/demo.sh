#!/usr/bin/env bash
# Local demo: one muloco-server and two muloco-workers on localhost train the default small
# GPT on Debian's fortunes corpus. Prints per-round validation loss and bytes, then a summary.
# Usage: scripts/demo.sh [BUILD_DIR] [extra server flags, e.g. --rounds=20]
set -euo pipefail
BUILD=${1:-build}; shift || true
DIR=$(mktemp -d /tmp/muloco-demo.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
# Log lines read "2026-12-03T16:20:01.123Z INFO [tag] message": drop the timestamp.
untime() { sed -E 's/^[^ ]+ //'; }

# Plaintext and open joins are fine on loopback; see README "Opening a run to volunteers" for TLS and tokens.
"$BUILD/muloco-server" --listen=127.0.0.1:0 --insecure --open_join --port_file="$DIR/port" --save_final="$DIR/server.bin" "$@" \
  >"$DIR/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [ -s "$DIR/port" ] && break; sleep 0.1; done
[ -s "$DIR/port" ] || { cat "$DIR/server.log"; echo "demo: server did not start"; exit 1; }
ADDR=127.0.0.1:$(cat "$DIR/port")
echo "demo: server on $ADDR, logs in $DIR"
start=$(date +%s)
for w in 1 2; do
  "$BUILD/muloco-worker" --server="$ADDR" --insecure --name="worker-$w" --save_final="$DIR/w$w.bin" >"$DIR/w$w.log" 2>&1 &
  pids+=($!)
done
# Follow worker 1 (both see the same global model) and the server's round closings.
tail -q -n +1 -f "$DIR/w1.log" "$DIR/server.log" --pid="${pids[1]}" |
  grep --line-buffered -E "joined|eval:|round [0-9]+: train_loss|closed|final:" | sed -u -E 's/^[^ ]+ //' &
tailer=$!
status=0
wait "${pids[1]}" || status=1
wait "${pids[2]}" || status=1
wait "${pids[0]}" || status=1
wait "$tailer" 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))
[ $status = 0 ] || { echo "demo: a process failed; logs in $DIR"; tail -5 "$DIR"/*.log; exit 1; }

echo
echo "==== summary ===="
grep -h "summary:" "$DIR/server.log" | untime
for w in 1 2; do grep -h "final:" "$DIR/w$w.log" | untime; done
grep -h "summary:" "$DIR/w1.log" | untime
if cmp -s "$DIR/server.bin" "$DIR/w1.bin" && cmp -s "$DIR/server.bin" "$DIR/w2.bin"; then
  echo "replicas: both workers are bit-identical to the server's final parameters"
else
  echo "replicas: MISMATCH"; exit 1
fi
echo "wall time: ${elapsed} s"
