#!/usr/bin/env bash
# The scale curves of bench/README.md: runs BUILD_DIR/bench/scale over the default grid
# (1M-100M parameters, 1-256 workers, 2-bit and dense, then the gRPC server at 10M with 1-16
# client threads), writes OUT/scale.csv and the table, and draws OUT/scale.png with gnuplot
# (time per round against workers x parameters, one line per codec and size).
#
#   bench/scale.sh [BUILD_DIR] [OUT_DIR]      (defaults: build, bench/results)
#   SCALE_FLAGS="--sizes=1e6,1e7 --workers=1,4,16" bench/scale.sh build /tmp/s
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench/results}
BIN=$BUILD/bench/scale
[ -x "$BIN" ] || { echo "scale.sh: $BIN not found; build it first (make build)" >&2; exit 1; }
mkdir -p "$OUT"
read -r -a EXTRA <<<"${SCALE_FLAGS:-}"
"$BIN" --csv="$OUT/scale.csv" "${EXTRA[@]}" | tee "$OUT/scale.txt"
if ! command -v gnuplot >/dev/null; then
  echo "scale.sh: no gnuplot (apt-get install gnuplot-nox): $OUT/scale.csv written, no plot" >&2
  exit 0
fi
# One data file per (part, codec, size) series: workers x params, seconds per round.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
awk -F, -v dir="$TMP" 'NR > 1 && $5 != "nan" {
  f = dir "/" $1 "_" $2 "_" $3 ".dat"; print $3 * $4, $5, $4 >> f
}' "$OUT/scale.csv"
plots=""
for f in "$TMP"/*.dat; do
  name=$(basename "$f" .dat)
  IFS=_ read -r part codec params <<<"$name"
  title="$part $codec $(awk -v p="$params" 'BEGIN { printf "%.1fM", p / 1e6 }')"
  plots+="${plots:+, }'$f' using 1:2 with linespoints title '$title'"
done
gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set output '$OUT/scale.png'
set logscale xy
set xlabel 'workers x parameters per round'
set ylabel 'seconds per round (first push to the update)'
set title 'muloco-server: one round on $(nproc) cores (bench/scale)'
set key left top
set grid
plot $plots
GP
echo "wrote $OUT/scale.csv, $OUT/scale.txt, $OUT/scale.png"
