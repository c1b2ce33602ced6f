// CUDA top-k per chunk: one block per chunk sorts (~|x| bits, index) keys in shared memory
// (bitonic), keeps the first k, and sorts their indices ascending: the same unique selection
// as kernels/cpu/topk.cc.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/subset.h"

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

// Entry t of a chunked top-k belongs to chunk t / k (every chunk but the last keeps k).
__global__ void GatherKernel(const float* x, size_t total, size_t chunk, size_t k, const uint32_t* idx, float* vals) {
  for (size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x; t < total; t += size_t{gridDim.x} * blockDim.x) {
    vals[t] = x[(t / k) * chunk + idx[t]];
  }
}

__global__ void ScatterKernel(const float* vals, size_t total, size_t chunk, size_t k, const uint32_t* idx,
                              float factor, float* sum) {
  for (size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x; t < total; t += size_t{gridDim.x} * blockDim.x) {
    sum[(t / k) * chunk + idx[t]] += factor * vals[t];
  }
}

// One block per chunk: its subset's step (kernels/subset.h) once, then its min(k, len)
// positions at idx[c * k ...], as cpu::SubsetChunks writes them.
__global__ void SubsetKernel(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx) {
  __shared__ uint64_t shared_a, shared_q;  // a __shared__ SubsetStep would need a constructor
  const size_t c = blockIdx.x, off = c * chunk, len = n - off < chunk ? n - off : chunk, m = k < len ? k : len;
  if (threadIdx.x == 0) {
    const SubsetStep s = SubsetOf(seed, c, len);
    shared_a = s.a;
    shared_q = s.q;
  }
  __syncthreads();
  SubsetStep step;
  step.a = shared_a;
  step.q = shared_q;
  for (size_t t = threadIdx.x; t < m; t += blockDim.x) idx[c * k + t] = SubsetIndex(step, t, len);
}

size_t KeptTotal(size_t n, size_t chunk, size_t k) { return (n / chunk) * k + (n % chunk < k ? n % chunk : k); }

}  // namespace

absl::Status TopKChunks(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx, void* stream) {
  if (chunk == 0 || chunk > kMaxChunk || (chunk & (chunk - 1)) || k > chunk) {
    return Invalid(__func__);
  }
  if (n == 0 || k == 0) return absl::OkStatus();
  TopKKernel<<<static_cast<unsigned>((n + chunk - 1) / chunk), kThreads, 0, AsStream(stream)>>>(x, n, chunk, k, idx);
  return Launched(__func__);
}

absl::Status GatherChunks(const float* x, size_t n, size_t chunk, size_t k, const uint32_t* idx, float* vals,
                          void* stream) {
  if (chunk == 0 || k == 0 || k > chunk) return Invalid(__func__);
  const size_t total = KeptTotal(n, chunk, k);
  if (total == 0) return absl::OkStatus();
  GatherKernel<<<GridFor(total, 256), 256, 0, AsStream(stream)>>>(x, total, chunk, k, idx, vals);
  return Launched(__func__);
}

absl::Status SubsetChunks(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx, void* stream) {
  if (chunk == 0 || k == 0 || k > chunk) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  SubsetKernel<<<static_cast<unsigned>((n + chunk - 1) / chunk), 256, 0, AsStream(stream)>>>(seed, n, chunk, k, idx);
  return Launched(__func__);
}

absl::Status ScatterAccumulateChunks(const float* vals, size_t n, size_t chunk, size_t k, const uint32_t* idx,
                                     float factor, float* sum, void* stream) {
  if (chunk == 0 || k == 0 || k > chunk) return Invalid(__func__);
  const size_t total = KeptTotal(n, chunk, k);
  if (total == 0) return absl::OkStatus();
  ScatterKernel<<<GridFor(total, 256), 256, 0, AsStream(stream)>>>(vals, total, chunk, k, idx, factor, sum);
  return Launched(__func__);
}

}  // namespace muloco::kernels::cuda
