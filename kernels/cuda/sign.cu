// CUDA sign packing, per-chunk mean |x| (fixed-order reduction) and vote counting; same
// bits as kernels/cpu/sign.cc.
#include "kernels/bitpack.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/sign.h"

namespace muloco::kernels::cuda {
namespace {

__global__ void SignPackKernel(const float* x, size_t n, uint64_t seed, uint8_t* out, size_t bytes) {
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < bytes; j += size_t{gridDim.x} * blockDim.x) {
    uint8_t b = 0;
    for (int t = 0; t < 8; ++t) {
      const size_t i = j * 8 + t;
      if (i < n) b |= (x[i] == 0.0f ? TieBit(seed + i) : static_cast<uint8_t>(x[i] > 0.0f)) << t;
    }
    out[j] = b;
  }
}

__global__ void MeanAbsKernel(const float* x, size_t n, size_t chunk, float* scale) {
  __shared__ double lanes[kLanes];
  const size_t c = blockIdx.x, off = c * chunk;
  const size_t len = (n - off < chunk) ? n - off : chunk;
  double s = 0;
  for (size_t i = threadIdx.x; i < len; i += kLanes) s += fabs(static_cast<double>(x[off + i]));
  lanes[threadIdx.x] = s;
  const double total = BlockTreeReduce(lanes);
  if (threadIdx.x == 0) scale[c] = len ? static_cast<float>(total / len) : 0.0f;
}

__global__ void VoteAccumulateKernel(const uint8_t* bits, size_t n, int32_t* counts) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    counts[i] += ((bits[i / 8] >> (i % 8)) & 1) ? 1 : -1;
  }
}

__global__ void VoteSignKernel(const int32_t* counts, size_t n, float* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    out[i] = counts[i] > 0 ? 1.0f : (counts[i] < 0 ? -1.0f : 0.0f);
  }
}

__global__ void SignAccumulateKernel(const uint8_t* bits, const float* scales, size_t n, size_t chunk, float factor,
                                     float* sum) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float s = factor * scales[i / chunk];
    sum[i] += ((bits[i / 8] >> (i % 8)) & 1) ? s : -s;
  }
}

}  // namespace

absl::Status SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out, void* stream) {
  const size_t bytes = PackedBytes(n, 1);
  if (bytes == 0) return absl::OkStatus();
  SignPackKernel<<<GridFor(bytes, 256), 256, 0, AsStream(stream)>>>(x, n, seed, out, bytes);
  return Launched(__func__);
}

absl::Status MeanAbsChunks(const float* x, size_t n, size_t chunk, float* scale, void* stream) {
  if (chunk == 0) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  MeanAbsKernel<<<static_cast<unsigned>((n + chunk - 1) / chunk), kLanes, 0, AsStream(stream)>>>(x, n, chunk, scale);
  return Launched(__func__);
}

absl::Status VoteAccumulate(const uint8_t* bits, size_t n, int32_t* counts, void* stream) {
  if (n == 0) return absl::OkStatus();
  VoteAccumulateKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(bits, n, counts);
  return Launched(__func__);
}

absl::Status VoteSign(const int32_t* counts, size_t n, float* out, void* stream) {
  if (n == 0) return absl::OkStatus();
  VoteSignKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(counts, n, out);
  return Launched(__func__);
}

absl::Status SignAccumulateChunks(const uint8_t* bits, const float* scales, size_t n, size_t chunk, float factor,
                                  float* sum, void* stream) {
  if (chunk == 0) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  SignAccumulateKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(bits, scales, n, chunk, factor, sum);
  return Launched(__func__);
}

}  // namespace muloco::kernels::cuda
