// CUDA quantizers: one block of kLanes threads per chunk, same arithmetic and reduction order
// as kernels/cpu/quantize.cc.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/quantize.h"

namespace muloco::kernels::cuda {
namespace {

struct BlockStats {
  double mean, var;
  float mu, scale;
  bool flat;
};

// Chunk moments in the order of cpu::Stats (quantize.cc); every thread of the block calls.
__device__ BlockStats ChunkStats(const float* xc, size_t len, int nbins) {
  __shared__ double lanes[2][kLanes];
  const int t = threadIdx.x;
  double s = 0, q = 0;
  for (size_t i = t; i < len; i += kLanes) {
    const double v = xc[i];
    s += v;
    q += v * v;
  }
  lanes[0][t] = s;
  lanes[1][t] = q;
  const double sum = BlockTreeReduce(lanes[0]);
  const double sumsq = BlockTreeReduce(lanes[1]);
  BlockStats st;
  st.mean = len ? sum / len : 0.0;
  st.mu = static_cast<float>(st.mean);
  st.var = len ? fmax(0.0, sumsq / len - st.mean * st.mean) : 0.0;
  st.scale = static_cast<float>(6.0 * sqrt(st.var) / nbins);
  st.flat = !(st.scale > 0) || !isfinite(1.0f / st.scale);
  return st;
}

// cpu::CentroidTable: lut[b] = mu + mean of (x - mu) over bin b, else fallback[b]. Each
// thread adds its elements (i = t, t + kLanes, ...) into its own lane, as the CPU does.
__device__ void BlockCentroids(const float* xc, size_t len, float mu, const uint8_t* codes, int nbins,
                               const float* fallback, float* lut) {
  __shared__ double bin_sum[16][kLanes];
  __shared__ unsigned long long count[16];
  const int t = threadIdx.x;
  for (int b = 0; b < nbins; ++b) bin_sum[b][t] = 0.0;
  if (t < 16) count[t] = 0;
  __syncthreads();
  for (size_t i = t; i < len; i += kLanes) {
    const uint8_t code = codes[i];
    bin_sum[code][t] += xc[i] - mu;
    atomicAdd(&count[code], 1ull);
  }
  for (int b = 0; b < nbins; ++b) {
    const double bs = BlockTreeReduce(bin_sum[b]);
    if (t == 0) lut[b] = count[b] ? static_cast<float>(static_cast<double>(mu) + bs / count[b]) : fallback[b];
  }
}

// This block's chunk of a batched quantizer call, with its moments. A flat chunk is already
// written (codes nbins/2, table mu) when OpenChunk returns: the kernel just returns.
struct BlockChunk {
  const float* x;
  uint8_t* codes;
  float* lut;
  size_t len;
  BlockStats st;
};
__device__ BlockChunk OpenChunk(const float* x, size_t n, size_t chunk, int bits, float* lut_all, uint8_t* codes_all) {
  const size_t c = blockIdx.x, off = c * chunk;
  const int nbins = 1 << bits, t = threadIdx.x;
  BlockChunk k{x + off, codes_all + off, lut_all + c * nbins, (n - off < chunk) ? n - off : chunk, {}};
  k.st = ChunkStats(k.x, k.len, nbins);
  if (k.st.flat) {
    for (int b = t; b < nbins; b += kLanes) k.lut[b] = k.st.mu;
    for (size_t i = t; i < k.len; i += kLanes) k.codes[i] = static_cast<uint8_t>(nbins / 2);
  }
  return k;
}

__global__ void StatQuantizeKernel(const float* x, size_t n, size_t chunk, int bits, float* lut_all, uint8_t* codes_all) {
  __shared__ float centre[256];
  const BlockChunk k = OpenChunk(x, n, chunk, bits, lut_all, codes_all);
  if (k.st.flat) return;
  const int nbins = 1 << bits, half = nbins / 2, t = threadIdx.x;
  const float inv = 1.0f / k.st.scale, offset = static_cast<float>(half);
  for (size_t i = t; i < k.len; i += kLanes) k.codes[i] = Code((k.x[i] - k.st.mu) * inv + offset, nbins);
  for (int b = t; b < nbins; b += kLanes) {
    centre[b] = static_cast<float>(k.st.mean + (b - half) * static_cast<double>(k.st.scale));
  }
  __syncthreads();  // codes and centre visible to the whole block
  if (bits == 8) {
    for (int b = t; b < nbins; b += kLanes) k.lut[b] = centre[b];
    return;
  }
  BlockCentroids(k.x, k.len, k.st.mu, k.codes, nbins, centre, k.lut);
}

__global__ void GaussianQuantizeKernel(const float* x, size_t n, size_t chunk, int bits, GaussianBins g,
                                       float* lut_all, uint8_t* codes_all) {
  __shared__ float thr[15], level[16];
  const BlockChunk k = OpenChunk(x, n, chunk, bits, lut_all, codes_all);
  if (k.st.flat) return;
  const int nbins = 1 << bits, t = threadIdx.x;
  const double sigma = sqrt(k.st.var);
  if (t + 1 < nbins) thr[t] = static_cast<float>(g.threshold[t] * sigma);
  if (t < nbins) level[t] = static_cast<float>(k.st.mean + g.level[t] * sigma);
  __syncthreads();
  for (size_t i = t; i < k.len; i += kLanes) {
    const float cv = k.x[i] - k.st.mu;
    uint8_t q = 0;
    for (int b = 0; b + 1 < nbins; ++b) q += cv > thr[b];
    k.codes[i] = q;
  }
  __syncthreads();
  BlockCentroids(k.x, k.len, k.st.mu, k.codes, nbins, level, k.lut);
}

__global__ void LinearQuantizeKernel(const float* x, size_t n, size_t chunk, int bits, float* lo_all, float* step_all,
                                     uint8_t* codes_all) {
  __shared__ float lo_s[kLanes], hi_s[kLanes];
  const size_t c = blockIdx.x, off = c * chunk;
  const size_t len = (n - off < chunk) ? n - off : chunk;
  const float* xc = x + off;
  const int nbins = 1 << bits, t = threadIdx.x;
  float lo = len ? xc[0] : 0.0f, hi = lo;
  for (size_t i = t; i < len; i += kLanes) {
    lo = fminf(lo, xc[i]);
    hi = fmaxf(hi, xc[i]);
  }
  lo_s[t] = lo;
  hi_s[t] = hi;
  for (int s = kLanes / 2; s > 0; s /= 2) {
    __syncthreads();
    if (t < s) {
      lo_s[t] = fminf(lo_s[t], lo_s[t + s]);
      hi_s[t] = fmaxf(hi_s[t], hi_s[t + s]);
    }
  }
  __syncthreads();
  lo = lo_s[0] + 0.0f;  // -0 -> +0: the order of equal zeros must not matter (cpu/quantize.cc)
  hi = hi_s[0] + 0.0f;
  const float step = (hi - lo) / static_cast<float>(nbins - 1);
  if (t == 0) {
    lo_all[c] = lo;
    step_all[c] = step;
  }
  const bool flat = !(step > 0) || !isfinite(1.0f / step);
  const float inv = flat ? 0.0f : 1.0f / step;
  for (size_t i = t; i < len; i += kLanes) codes_all[off + i] = flat ? 0 : Code((xc[i] - lo) * inv, nbins);
}

__global__ void DequantizeAccumulateKernel(const float* lut, const uint8_t* codes, size_t n, size_t chunk, int nbins,
                                           float factor, float* sum) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    sum[i] += factor * lut[(i / chunk) * nbins + codes[i]];
  }
}

// LinearTable's entry lo + b * step, from (lo, step) pairs per chunk.
__global__ void DequantizeLinearKernel(const float* lo_step, const uint8_t* codes, size_t n, size_t chunk,
                                       float factor, float* sum) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float* m = lo_step + 2 * (i / chunk);
    sum[i] += factor * (m[0] + static_cast<float>(codes[i]) * m[1]);
  }
}

__global__ void LookupKernel(const float* lut, const uint8_t* codes, size_t n, float* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    out[i] = lut[codes[i]];
  }
}

size_t Chunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

}  // namespace

absl::Status StatQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lut, uint8_t* codes, void* stream) {
  if (!ValidCodeBits(bits) || chunk == 0) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  StatQuantizeKernel<<<static_cast<unsigned>(Chunks(n, chunk)), kLanes, 0, AsStream(stream)>>>(x, n, chunk, bits, lut,
                                                                                               codes);
  return Launched(__func__);
}

absl::Status GaussianQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lut, uint8_t* codes,
                           void* stream) {
  if (!ValidGaussianBits(bits) || chunk == 0) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  GaussianQuantizeKernel<<<static_cast<unsigned>(Chunks(n, chunk)), kLanes, 0, AsStream(stream)>>>(
      x, n, chunk, bits, GaussianBinsFor(bits), lut, codes);
  return Launched(__func__);
}

absl::Status LinearQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lo, float* step, uint8_t* codes,
                         void* stream) {
  if (!ValidCodeBits(bits) || chunk == 0) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  LinearQuantizeKernel<<<static_cast<unsigned>(Chunks(n, chunk)), kLanes, 0, AsStream(stream)>>>(x, n, chunk, bits, lo,
                                                                                                 step, codes);
  return Launched(__func__);
}

absl::Status DequantizeAccumulateChunks(const float* lut, const uint8_t* codes, size_t n, size_t chunk, int bits, float factor,
                                        float* sum, void* stream) {
  if (!ValidCodeBits(bits) || chunk == 0) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  DequantizeAccumulateKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(lut, codes, n, chunk, NumBins(bits), factor, sum);
  return Launched(__func__);
}

int DeviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

absl::Status DequantizeLinearChunks(const float* lo_step, const uint8_t* codes, size_t n, size_t chunk, float factor,
                                   float* sum, void* stream) {
  if (chunk == 0) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  DequantizeLinearKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(lo_step, codes, n, chunk, factor, sum);
  return Launched(__func__);
}

absl::Status Lookup(const float* lut, const uint8_t* codes, size_t n, float* out, void* stream) {
  if (n == 0) return absl::OkStatus();
  LookupKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(lut, codes, n, out);
  return Launched(__func__);
}

}  // namespace muloco::kernels::cuda
