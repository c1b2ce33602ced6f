// CUDA bf16 encode with the rounding error kept; same bits as kernels/cpu/bf16.cc.
#include "kernels/bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace muloco::kernels::cuda {
namespace {

__global__ void Bf16EncodeKernel(float* e, size_t n, uint16_t* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint16_t h = Bf16FromBits(__float_as_uint(e[i]));
    out[i] = h;
    e[i] -= __uint_as_float(Bf16ToBits(h));
  }
}

}  // namespace

absl::Status Bf16Encode(float* e, size_t n, uint16_t* out, void* stream) {
  if (n == 0) return absl::OkStatus();
  Bf16EncodeKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(e, n, out);
  return Launched(__func__);
}

}  // namespace muloco::kernels::cuda
