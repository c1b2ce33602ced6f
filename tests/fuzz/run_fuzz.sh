#!/usr/bin/env bash
# Builds the payload-decoder fuzzer (libFuzzer + ASan + UBSan) and runs it for a bounded time
# on a seed corpus of valid payloads of every scheme. Fails on any crash, leak, timeout,
# out-of-memory or broken invariant (see decode_fuzzer.cc); the input that did it is left
# under WORK_DIR/artifacts/, and `WORK_DIR/decode_fuzzer FILE` replays it.
#
# Usage: tests/fuzz/run_fuzz.sh SOURCE_DIR WORK_DIR [SECONDS=20]
# Needs clang++ with the libFuzzer runtime (Debian: clang, libclang-rt-14-dev), pkg-config,
# abseil (libabsl-dev) and xxHash (libxxhash-dev). FUZZ_JOBS: parallel compiles (default 2).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 SOURCE_DIR WORK_DIR [SECONDS]" >&2
  exit 2
fi
SRC=$(cd "$1" && pwd)
WORK=$2
SECONDS_TO_RUN=${3:-20}
CXX=${FUZZ_CXX:-clang++}
JOBS=${FUZZ_JOBS:-2}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

die() { echo "run_fuzz: $*" >&2; exit 1; }
command -v "$CXX" >/dev/null || die "$CXX not found (Debian packages: clang libclang-rt-14-dev)"
command -v pkg-config >/dev/null || die "pkg-config not found"

# The libFuzzer runtime ships separately from clang on Debian: check for it up front.
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$WORK/probe.cc"
"$CXX" -fsanitize=fuzzer,address,undefined "$WORK/probe.cc" -o "$WORK/probe" >"$WORK/probe.log" 2>&1 ||
  { cat "$WORK/probe.log" >&2; die "$CXX cannot link a libFuzzer target (Debian package: libclang-rt-14-dev)"; }

LIBS=$(pkg-config --libs absl_status absl_statusor absl_strings libxxhash) ||
  die "pkg-config cannot find abseil / xxhash (Debian packages: libabsl-dev libxxhash-dev)"
COMMON_FLAGS="-std=c++17 -O1 -g -ffp-contract=off -fno-omit-frame-pointer -I$SRC $(pkg-config --cflags absl_status libxxhash)"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
# Coverage instrumentation for everything the decoder runs; the runtime is linked last.
export CXX WORK COMPILE="$CXX $COMMON_FLAGS $SAN -fsanitize=fuzzer-no-link"

SOURCES=(codec/codec.cc codec/codec_schemes.cc codec/codec_backend_cpu.cc codec/checksum.cc codec/parallel.cc "$SRC"/kernels/cpu/*.cc tests/fuzz/decode_fuzzer.cc tests/fuzz/make_seeds.cc)
SOURCES=("${SOURCES[@]#"$SRC"/}")
mkdir -p "$WORK/obj"
start=$(date +%s)
compile() {
  local src=$1 obj
  obj="$WORK/obj/$(echo "$src" | tr / _).o"
  $COMPILE -c "$SRC/$src" -o "$obj"
}
export -f compile
export SRC
printf '%s\n' "${SOURCES[@]}" | xargs -P "$JOBS" -I{} bash -c 'compile "$1"' _ {} || die "compile failed"

LIB_OBJS=()
for s in "${SOURCES[@]}"; do
  case $s in tests/*) ;; *) LIB_OBJS+=("$WORK/obj/$(echo "$s" | tr / _).o") ;; esac
done
# shellcheck disable=SC2086
$CXX $SAN -fsanitize=fuzzer "$WORK/obj/tests_fuzz_decode_fuzzer.cc.o" "${LIB_OBJS[@]}" $LIBS -o "$WORK/decode_fuzzer"
# shellcheck disable=SC2086
$CXX $SAN -fsanitize=fuzzer-no-link "$WORK/obj/tests_fuzz_make_seeds.cc.o" "${LIB_OBJS[@]}" $LIBS -o "$WORK/make_seeds"
echo "run_fuzz: built in $(( $(date +%s) - start )) s"

rm -rf "$WORK/seeds" "$WORK/corpus" "$WORK/artifacts"
mkdir -p "$WORK/seeds" "$WORK/corpus" "$WORK/artifacts"
"$WORK/make_seeds" "$WORK/seeds"

# New inputs go to corpus/ (first directory); seeds/ stays as generated.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
rc=0
"$WORK/decode_fuzzer" -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=2048 -timeout=10 -max_len=32768 \
  -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" "$WORK/corpus" "$WORK/seeds" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "run_fuzz: FAILED (exit $rc); inputs that did it:" >&2
  ls -l "$WORK/artifacts" >&2
  echo "run_fuzz: replay with: $WORK/decode_fuzzer $WORK/artifacts/<file>" >&2
  exit "$rc"
fi
echo "run_fuzz: passed ($SECONDS_TO_RUN s, $(ls "$WORK/corpus" | wc -l) new corpus inputs)"
