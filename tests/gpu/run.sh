#!/usr/bin/env bash
# Everything that needs a GPU, in one go for a short GPU lease (about 8 minutes):
#  1. unpacks the carried Debian packages (gRPC, protobuf, abseil, prometheus-cpp, xxhash,
#     GoogleTest; fetched here by tests/gpu/fetch_debs.sh into .gpu-debs/) into a prefix;
#  2. builds the project against them and the host's CUDA LibTorch (the installed PyTorch);
#  3. runs the GPU tests: CUDA kernels and the codec's CUDA backend against the CPU bit for
#     bit, a server with two --device=cuda workers whose replicas end bit-identical (fp32 and
#     bf16 autocast);
#  4. runs the GPU benchmarks: kernel GB/s against a device-to-device copy, inner-loop tokens/s
#     against PyTorch eager on the same GPU (GPT-2-small shapes), Newton–Schulz times;
#  and prints a short table last. Results also land in $OUT when it is set.
# Stage 1 builds only the kernels and the codec (MULOCO_KERNELS_ONLY), so their bit-exactness
# results come even if stage 2 (LibTorch, gRPC) fails to build there.
# Usage, from the repository root on the GPU host (with .gpu-debs carried):
#   tests/gpu/run.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
RES=${OUT:-$BUILD/results}
mkdir -p "$RES"
DEPS=/tmp/muloco-deps
PY=$(command -v python3)
declare -A ROW
status=0
GEN=$(command -v ninja >/dev/null && echo "-G Ninja")
step() { echo; echo "== $* ($(date +%T))"; }
fail() { echo "FAIL: $*"; status=1; }

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$RES/device.txt"
ROW[device]=$(head -1 "$RES/device.txt")

step "dependencies from .gpu-debs"
[ -d .gpu-debs ] || { echo "no .gpu-debs: run tests/gpu/fetch_debs.sh on a Debian 12 machine, carry .gpu-debs"; exit 2; }
tests/gpu/unpack_debs.sh "$DEPS" >"$RES/unpack.log" 2>&1 || { tail -20 "$RES/unpack.log"; exit 2; }
# shellcheck disable=SC1091
. "$DEPS/env.sh"
TORCH_PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI)' |
  tee "$RES/torch.txt"

step "stage 1: kernels and codec (no LibTorch, gRPC or protobuf needed)"
cmake -S . -B "$BUILD-codec" $GEN -C "$DEPS/gpu-deps.cmake" -DMULOCO_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}" >"$RES/configure1.log" 2>&1 || { tail -30 "$RES/configure1.log"; fail "configure (stage 1)"; }
timeout 240 cmake --build "$BUILD-codec" -j "$(nproc)" >"$RES/build1.log" 2>&1 ||
  { grep -m20 -B2 -A8 "error" "$RES/build1.log"; fail "build (stage 1)"; }
for t in kernels_test cuda_kernels_test codec_golden_test codec_cuda_test; do
  if [ -x "$BUILD-codec/tests/$t" ] && "$BUILD-codec/tests/$t" --gtest_brief=1 >"$RES/$t.log" 2>&1; then
    ROW[$t]="pass ($(grep -c '^\[  SKIPPED' "$RES/$t.log" || true) skipped; $(grep -m1 -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$RES/$t.log"))"
  else
    tail -30 "$RES/$t.log" 2>/dev/null; ROW[$t]=FAIL; fail "$t"
  fi
done
[ -x "$BUILD-codec/bench/cuda_speed" ] && "$BUILD-codec/bench/cuda_speed" | tee "$RES/cuda_speed.txt"

step "stage 2: everything, against the host's CUDA LibTorch"
cmake -S . -B "$BUILD" $GEN -C "$DEPS/gpu-deps.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$CMAKE_PREFIX_PATH" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}" \
  >"$RES/configure2.log" 2>&1 || { tail -40 "$RES/configure2.log"; fail "configure (stage 2)"; }
timeout 300 cmake --build "$BUILD" -j "$(nproc)" --target muloco-server muloco-worker train_speed muon_speed \
  >"$RES/build2.log" 2>&1 || { grep -m20 -B2 -A8 "error" "$RES/build2.log"; fail "build (stage 2)"; }
for dtype in fp32 bf16; do
  if timeout 300 $PY tests/gpu/train_two_workers.py "$BUILD" --dtype $dtype >"$RES/train_$dtype.log" 2>&1; then
    ROW[train_$dtype]="pass: $(grep -o 'val loss fell: [0-9.]* -> [0-9.]*' "$RES/train_$dtype.log" | head -1)"
  else
    tail -40 "$RES/train_$dtype.log"; ROW[train_$dtype]=FAIL; fail "two GPU workers ($dtype)"
  fi
done

step "benchmarks"
GPT2=(--n_layer=12 --n_head=12 --d_model=768 --context=1024 --batch_size=16)
for dtype in fp32 bf16; do
  "$BUILD/bench/train_speed" --device=cuda --dtype=$dtype --steps=20 --warmup=5 "${GPT2[@]}" >"$RES/train_speed_$dtype.txt" 2>&1 ||
    { tail -5 "$RES/train_speed_$dtype.txt"; fail "train_speed $dtype"; }
  $PY bench/torch_eager_gpt.py --device cuda --dtype $dtype --steps 20 --warmup 5 --n_layer 12 --n_head 12 \
    --d_model 768 --context 1024 --batch_size 16 >"$RES/torch_eager_$dtype.txt" 2>&1 ||
    { tail -5 "$RES/torch_eager_$dtype.txt"; fail "torch eager $dtype"; }
  ours=$(awk '/^muloco_tokens_per_s/ {print $2}' "$RES/train_speed_$dtype.txt")
  theirs=$(awk '/^torch_tokens_per_s/ {print $2}' "$RES/torch_eager_$dtype.txt")
  ROW[tokens_$dtype]="muloco ${ours:-?} tokens/s, PyTorch eager ${theirs:-?}: $(awk -v a="${ours:-0}" -v b="${theirs:-0}" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "?"}')"
done
[ -x "$BUILD/bench/muon_speed" ] && "$BUILD/bench/muon_speed" --device=cuda | tee "$RES/muon_speed.txt"

step "summary"
{
  echo "muloco GPU run, $(date -u +%F), ${ROW[device]}; $(cat "$RES/torch.txt")"
  for k in kernels_test cuda_kernels_test codec_golden_test codec_cuda_test train_fp32 train_bf16 tokens_fp32 tokens_bf16; do
    printf '%-20s %s\n' "$k" "${ROW[$k]:-not run}"
  done
  echo "kernels against a device-to-device copy (cuda_speed):"
  grep -E "copy|GB/s" "$RES/cuda_speed.txt" 2>/dev/null | head -14
  echo "Newton-Schulz (muon_speed --device=cuda):"
  sed -n '2,8p' "$RES/muon_speed.txt" 2>/dev/null
} | tee "$RES/summary.txt"
exit $status
