#!/usr/bin/env bash
# Training-speed benchmark: tokens/s of muloco's inner loop (build/bench/train_speed) next to
# the same model and optimizer in PyTorch eager (bench/torch_eager_gpt.py), at the same
# thread count, with the ratio; then the bytes one worker sends and receives per round.
#
#   bench/run.sh [BUILD_DIR]            (default: build; `make bench` passes $(BUILD))
#   STEPS=30 THREADS="1 2" bench/run.sh build
#
# Environment: STEPS (timed steps, default 30), THREADS (space-separated thread counts,
# default 1), REPEATS (runs of each side, interleaved; the best tokens/s counts, which damps
# noise from other load on the machine; default 3), PY (interpreter with torch, default
# Debian's /usr/bin/python3), MULOCO_FLAGS (extra train_speed flags, e.g.
# "--uplink_codec=quant:bits=2 --downlink_codec=quant:bits=4" for the bytes of other codecs;
# flags that change the model or batch leave the PyTorch side behind: run.sh warns when the
# parameter counts differ).
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-30}
THREADS=${THREADS:-1}
REPEATS=${REPEATS:-3}
PY=${PY:-/usr/bin/python3}
read -r -a EXTRA <<<"${MULOCO_FLAGS:-}"
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$BUILD/bench/train_speed
[ -x "$BIN" ] || { echo "run.sh: $BIN not found; build it first (make build)" >&2; exit 1; }
"$PY" -c 'import torch' 2>/dev/null || { echo "run.sh: $PY has no torch (apt-get install python3-torch)" >&2; exit 1; }

value() { awk -v k="$1" '$1 == k { print $2 }'; }   # value of a `name value` line on stdin
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a ? b : a) }'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "model: demo GPT (DefaultRunConfig), batch 16 x context 64, $STEPS timed steps after 3 warmup steps, best of $REPEATS runs"
rows=()
for t in $THREADS; do
  mt=0; pt=0
  for ((r = 0; r < REPEATS; r++)); do
    m=$("$BIN" --steps="$STEPS" --threads="$t" ${EXTRA[@]+"${EXTRA[@]}"})
    p=$("$PY" "$HERE/torch_eager_gpt.py" --steps "$STEPS" --threads "$t")
    mt=$(max "$mt" "$(value muloco_tokens_per_s <<<"$m")"); pt=$(max "$pt" "$(value torch_tokens_per_s <<<"$p")")
  done
  rows+=("$(awk -v t="$t" -v m="$mt" -v p="$pt" 'BEGIN { printf "%7d  %18d  %19d  %14.2f", t, m, p, m / p }')")
  up=$(value muloco_bytes_up_per_round <<<"$m"); down=$(value muloco_bytes_down_per_round <<<"$m")
  upc=$(value muloco_uplink_codec <<<"$m"); downc=$(value muloco_downlink_codec <<<"$m")
  dense=$(value muloco_bytes_dense_fp32 <<<"$m")
  params=$(value muloco_params <<<"$m"); tparams=$(value torch_params <<<"$p")
  [ "$params" = "$tparams" ] || echo "warning: parameter counts differ: muloco $params, pytorch $tparams" >&2
done
echo
printf "%7s  %18s  %19s  %14s\n" threads "muloco tokens/s" "pytorch tokens/s" "muloco/pytorch"
printf "%s\n" "${rows[@]}"
echo
echo "parameters: $params"
echo "bytes per round per worker (payloads as sent: header, per-tensor segment table, data):"
echo "  up   (worker -> server, $upc): $up"
echo "  down (server -> worker, $downc): $down"
echo "  for scale, all parameters as one dense fp32 segment: $dense"
