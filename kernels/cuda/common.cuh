// Shared device helpers for the CUDA kernels: launch geometry, errors as Status, and the block
// reduction that reproduces kernels/reduce.h's order (kLanes threads, tree s = 128 .. 1).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"

#include <cstddef>
#include <cstdint>

#include "kernels/reduce.h"

namespace muloco::kernels::cuda {

inline cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }
// The launch just made (and any earlier asynchronous failure) as a Status naming `what`.
inline absl::Status Launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
inline absl::Status Invalid(const char* what) {
  return absl::InvalidArgumentError(std::string("CUDA ") + what + ": arguments outside its REQUIRES");
}
inline unsigned GridFor(size_t n, unsigned block) {
  const size_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535u * 16u ? (g ? g : 1) : 65535u * 16u);
}

// Tree-combines shared[0..kLanes) exactly as TreeReduce; every thread of the block must call.
__device__ inline double BlockTreeReduce(double* shared) {
  for (int s = kLanes / 2; s > 0; s /= 2) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
  }
  __syncthreads();
  const double r = shared[0];
  __syncthreads();
  return r;
}

__device__ inline uint8_t Code(float t, int nbins) {
  const float r = rintf(t);
  return static_cast<uint8_t>(fminf(fmaxf(r, 0.0f), static_cast<float>(nbins - 1)));
}

}  // namespace muloco::kernels::cuda
