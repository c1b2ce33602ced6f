// CUDA top-k per chunk: one block per chunk sorts (~|x| bits, index) keys in shared memory
// (bitonic), keeps the first k, and sorts their indices ascending: the same unique selection
// as kernels/cpu/topk.cc.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace muloco::kernels::cuda {
namespace {

constexpr int kMaxChunk = 4096;
constexpr int kThreads = 512;

template <typename T>
__device__ void BitonicSort(T* a, int len) {  // len: a power of two
  for (int size = 2; size <= len; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < len; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const bool up = (i & size) == 0;
          if ((a[i] > a[j]) == up) {
            const T tmp = a[i];
            a[i] = a[j];
            a[j] = tmp;
          }
        }
      }
    }
  }
  __syncthreads();
}

__device__ int Pow2AtLeast(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

__global__ void TopKKernel(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx_out) {
  __shared__ unsigned long long keys[kMaxChunk];
  __shared__ uint32_t picked[kMaxChunk];
  const size_t c = blockIdx.x, off = c * chunk;
  const int len = static_cast<int>((n - off < chunk) ? n - off : chunk);
  const int kk = static_cast<int>(k < static_cast<size_t>(len) ? k : len);
  const int padded = Pow2AtLeast(len);
  for (int i = threadIdx.x; i < padded; i += blockDim.x) {
    if (i < len) {
      const uint32_t mag = __float_as_uint(fabsf(x[off + i]));
      keys[i] = (static_cast<unsigned long long>(~mag) << 32) | static_cast<uint32_t>(i);
    } else {
      keys[i] = ~0ull;
    }
  }
  BitonicSort(keys, padded);
  const int kpad = Pow2AtLeast(kk);
  for (int i = threadIdx.x; i < kpad; i += blockDim.x) picked[i] = i < kk ? static_cast<uint32_t>(keys[i]) : 0xffffffffu;
  BitonicSort(picked, kpad);
  for (int i = threadIdx.x; i < kk; i += blockDim.x) idx_out[c * k + i] = picked[i];
}

}  // namespace

int TopKChunks(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx, void* stream) {
  if (chunk == 0 || chunk > kMaxChunk || (chunk & (chunk - 1)) || k > chunk) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (n == 0 || k == 0) return 0;
  TopKKernel<<<static_cast<unsigned>((n + chunk - 1) / chunk), kThreads, 0, AsStream(stream)>>>(x, n, chunk, k, idx);
  return LastError();
}

}  // namespace muloco::kernels::cuda
