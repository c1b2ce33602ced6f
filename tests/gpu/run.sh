#!/usr/bin/env bash
# Everything that needs a GPU, in one go for a short GPU lease: builds kernels/ (CPU + CUDA),
# runs the CPU-vs-CUDA bit-exactness tests and the GPU kernel benchmark. Needs only CMake,
# a C++ compiler, nvcc and GoogleTest (MULOCO_KERNELS_ONLY: no LibTorch or gRPC).
# Usage: tests/gpu/run.sh [BUILD_DIR]   (results also land in $OUT when set)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
ARCH=${CUDA_ARCH:-native}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
cmake -S . -B "$BUILD" -DMULOCO_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH"
cmake --build "$BUILD" -j "$(nproc)" --target kernels_test cuda_kernels_test cuda_speed
status=0
"$BUILD/tests/kernels_test" --gtest_brief=1 || status=1
"$BUILD/tests/cuda_kernels_test" || status=1
"$BUILD/bench/cuda_speed" | tee "${OUT:-$BUILD}/cuda_speed.txt" || status=1
exit $status
