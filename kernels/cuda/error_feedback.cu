// CUDA error-feedback update, as kernels/cpu/error_feedback.cc (no FMA: -fmad=false).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace muloco::kernels::cuda {
namespace {

__global__ void EfUpdateKernel(float* e, const float* delta, size_t n, float beta) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    e[i] = beta == 1.0f ? e[i] + delta[i] : beta * e[i] + delta[i];
  }
}

}  // namespace

absl::Status EfUpdate(float* e, const float* delta, size_t n, float beta, void* stream) {
  if (n == 0) return absl::OkStatus();
  EfUpdateKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(e, delta, n, beta);
  return Launched(__func__);
}

}  // namespace muloco::kernels::cuda
