#!/usr/bin/env bash
# Everything that needs a GPU, in one go for a short GPU lease (under 9 minutes, every step
# bounded by what is left of that):
#  1. unpacks the carried Debian packages (gRPC, protobuf, abseil, prometheus-cpp, xxhash,
#     GoogleTest) and the fortunes corpus (tests/gpu/fetch_debs.sh put them in .gpu-debs/);
#  2. stage 1 builds only the kernels and the codec (MULOCO_KERNELS_ONLY: no LibTorch, gRPC or
#     protobuf) and checks them against the CPU bit for bit, so those results come first;
#  3. stage 2 builds the server, worker and benchmarks against the host's CUDA LibTorch (the
#     installed PyTorch), runs a server with two --device=cuda workers (fp32, bf16) whose
#     replicas must end bit-identical, and the GPU benchmarks: kernel GB/s against a
#     device-to-device copy, inner-loop tokens/s against PyTorch eager on the same GPU
#     (GPT-2-small shapes), Newton–Schulz times.
# Each result is appended to summary.txt as it comes; the table is printed last. Results and
# logs land in $OUT when it is set, else in BUILD_DIR/results.
# Usage, from the repository root on the GPU host (with .gpu-debs carried):
#   tests/gpu/run.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
RES=${OUT:-$BUILD/results}
mkdir -p "$RES"
DEPS=/tmp/muloco-deps
PY=$(command -v python3)
GEN=$(command -v ninja >/dev/null && echo "-G Ninja")
DATA=$PWD/.gpu-debs/fortunes
DEADLINE=$(($(date +%s) + ${BUDGET_S:-530}))
SUMMARY=$RES/summary.txt
status=0
step() { echo; echo "== $* ($(date +%T), $((DEADLINE - $(date +%s))) s left)"; }
row() { printf '%-22s %s\n' "$1" "$2" | tee -a "$SUMMARY"; }
# within S CMD...: runs CMD for at most S seconds, and never past the deadline (less 10 s).
within() {
  local s=$1 left=$((DEADLINE - $(date +%s) - 10))
  shift
  [ "$left" -lt "$s" ] && s=$left
  [ "$s" -le 0 ] && { echo "skipped (out of time): $*"; return 124; }
  timeout "$s" "$@"
}

[ -x /usr/local/cuda/bin/nvcc ] && PATH=/usr/local/cuda/bin:$PATH  # often not on PATH in fresh images
: >"$SUMMARY"
step "device"
row device "$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader 2>&1 | head -1)"
row date "$(date -u +%F)"
row nvcc "$(nvcc --version 2>/dev/null | tail -n 1 || echo 'none on PATH')"
command -v nvcc >/dev/null || { echo "no nvcc: the CUDA toolkit is needed to build the kernels"; exit 2; }
[ -d .gpu-debs ] || { echo "no .gpu-debs: run tests/gpu/fetch_debs.sh on Debian 12 and carry .gpu-debs"; exit 2; }

step "dependencies from .gpu-debs"
tests/gpu/unpack_debs.sh "$DEPS" >"$RES/unpack.log" 2>&1 || { tail -n 20 "$RES/unpack.log"; exit 2; }
# shellcheck disable=SC1091
. "$DEPS/env.sh"
# One import of torch (seconds on a GPU host) for everything the stages need to know.
read -r TORCH_VERSION TORCH_CUDA TORCH_ABI TORCH_PREFIX < <($PY -c 'import torch; print(torch.__version__,
  torch.version.cuda or "none", int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.utils.cmake_prefix_path)' 2>"$RES/torch.log")
row torch "${TORCH_VERSION:-$(tail -n 1 "$RES/torch.log")} cuda $TORCH_CUDA cxx11abi $TORCH_ABI"
# The toolkit's CUDA runtime is loaded first (our kernels link it) and serves LibTorch too:
# it must be the major version PyTorch was built for, and no older.
NVCC_CUDA=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
if [ "${TORCH_CUDA%%.*}" != "${NVCC_CUDA%%.*}" ] || [ "$(printf '%s\n' "$TORCH_CUDA" "$NVCC_CUDA" | sort -V | head -1)" != "$TORCH_CUDA" ]; then
  row "cuda versions" "WARNING: toolkit $NVCC_CUDA, PyTorch built for ${TORCH_CUDA:-none}: stage 2 may fail to load"
fi
# CMake 3.24+ knows "native"; older ones get the GPU's compute capability (9.0 -> 90).
CUDA_ARCH=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')}

step "stage 1: kernels and codec"
ARCH=(-DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}")
if within 60 cmake -S . -B "$BUILD-codec" $GEN -C "$DEPS/gpu-deps.cmake" -DMULOCO_KERNELS_ONLY=ON \
     -DCMAKE_BUILD_TYPE=Release "${ARCH[@]}" >"$RES/configure1.log" 2>&1 &&
   within 180 cmake --build "$BUILD-codec" -j "$(nproc)" >"$RES/build1.log" 2>&1; then
  for t in kernels_test cuda_kernels_test codec_golden_test codec_cuda_test; do
    if within 60 "$BUILD-codec/tests/$t" >"$RES/$t.log" 2>&1; then
      row "$t" "pass: $(grep -c '^\[       OK' "$RES/$t.log") passed, $(grep -c '^\[  SKIPPED \] .* ([0-9]* ms)' "$RES/$t.log") skipped"
    else
      tail -n 30 "$RES/$t.log"; row "$t" "FAIL (log: $t.log)"; status=1
    fi
  done
  within 60 "$BUILD-codec/bench/cuda_speed" >"$RES/cuda_speed.txt" 2>&1 || status=1
  cat "$RES/cuda_speed.txt"
else
  tail -n 30 "$RES/configure1.log" "$RES/build1.log"; row stage1 "FAIL: build (logs configure1.log, build1.log)"; status=1
fi

step "stage 2: server, worker and benchmarks against CUDA LibTorch"
PREFIXES=$TORCH_PREFIX${CMAKE_PREFIX_PATH:+;${CMAKE_PREFIX_PATH//:/;}}
if [ "$TORCH_ABI" != 1 ]; then
  # Debian's gRPC, protobuf and abseil use the C++11 ABI; pip wheels before PyTorch 2.7 do not.
  row stage2 "SKIP: this PyTorch uses the pre-C++11 ABI (needs PyTorch >= 2.7, or a cxx11-abi LibTorch)"; status=1
elif within 120 cmake -S . -B "$BUILD" $GEN -C "$DEPS/gpu-deps.cmake" -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_PREFIX_PATH="$PREFIXES" "${ARCH[@]}" >"$RES/configure2.log" 2>&1 &&
   within 300 cmake --build "$BUILD" -j "$(nproc)" --target muloco-server muloco-worker train_speed muon_speed \
     >"$RES/build2.log" 2>&1; then
  for dtype in fp32 bf16; do
    if within 90 $PY tests/gpu/train_two_workers.py "$BUILD" --dtype $dtype --data "$DATA" --logs "$RES" --timeout 80 \
         >"$RES/train_$dtype.txt" 2>&1; then
      row "train_$dtype" "pass: w0 $(grep -o 'val loss fell: [0-9.]* -> [0-9.]*' "$RES/train_$dtype.txt" | head -1), replicas bit-identical"
    else
      cat "$RES/train_$dtype.txt"; row "train_$dtype" "FAIL (train_$dtype.txt)"; status=1
    fi
  done
  GPT2=(--n_layer=12 --n_head=12 --d_model=768 --context=1024 --batch_size=16)
  for dtype in fp32 bf16; do
    within 60 "$BUILD/bench/train_speed" --device=cuda --dtype=$dtype --steps=20 --warmup=5 --data="$DATA" "${GPT2[@]}" \
      >"$RES/train_speed_$dtype.txt" 2>&1 || status=1
    within 60 $PY bench/torch_eager_gpt.py --device cuda --dtype $dtype --steps 20 --warmup 5 --data "$DATA" \
      --n_layer 12 --n_head 12 --d_model 768 --context 1024 --batch_size 16 >"$RES/torch_eager_$dtype.txt" 2>&1 || status=1
    ours=$(awk '/^muloco_tokens_per_s/ {print $2}' "$RES/train_speed_$dtype.txt")
    theirs=$(awk '/^torch_tokens_per_s/ {print $2}' "$RES/torch_eager_$dtype.txt")
    row "tokens/s $dtype" "muloco ${ours:-FAIL} against PyTorch eager ${theirs:-FAIL}: $(awk -v a="${ours:-0}" -v b="${theirs:-0}" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", a / b; else print "?"}') (GPT-2-small shapes, batch 16 x 1024)"
  done
  within 60 "$BUILD/bench/muon_speed" --device=cuda >"$RES/muon_speed.txt" 2>&1 || status=1
else
  tail -n 40 "$RES/configure2.log" "$RES/build2.log"; row stage2 "FAIL: build (logs configure2.log, build2.log)"; status=1
fi

step "summary"
{
  echo "kernels against a device-to-device copy (cuda_speed):"
  cat "$RES/cuda_speed.txt" 2>/dev/null | head -16
  echo "Newton-Schulz (muon_speed --device=cuda):"
  cat "$RES/muon_speed.txt" 2>/dev/null | head -9
} >>"$SUMMARY"
cat "$SUMMARY"
exit $status
