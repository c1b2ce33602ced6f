// CUDA quantizers: one block of kLanes threads per chunk, same arithmetic and reduction order
// as kernels/cpu/quantize.cc.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/quantize.h"

namespace muloco::kernels::cuda {
namespace {

__global__ void StatQuantizeKernel(const float* x, size_t n, size_t chunk, int bits, float* lut_all, uint8_t* codes_all) {
  __shared__ double lanes[2][kLanes];
  __shared__ double bin_sum[16][kLanes];
  __shared__ unsigned long long count[16];
  const size_t c = blockIdx.x, off = c * chunk;
  const size_t len = (n - off < chunk) ? n - off : chunk;
  const float* xc = x + off;
  uint8_t* codes = codes_all + off;
  const int nbins = 1 << bits, half = nbins / 2, t = threadIdx.x;
  float* lut = lut_all + c * nbins;

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
  const double mean = len ? sum / len : 0.0;
  const float mu = static_cast<float>(mean);
  const double var = len ? fmax(0.0, sumsq / len - mean * mean) : 0.0;
  const float scale = static_cast<float>(6.0 * sqrt(var) / nbins);
  if (!(scale > 0) || !isfinite(1.0f / scale)) {
    for (int b = t; b < nbins; b += kLanes) lut[b] = mu;
    for (size_t i = t; i < len; i += kLanes) codes[i] = static_cast<uint8_t>(half);
    return;
  }
  const float inv = 1.0f / scale, offset = static_cast<float>(half);
  if (bits == 8) {
    for (size_t i = t; i < len; i += kLanes) codes[i] = Code((xc[i] - mu) * inv + offset, nbins);
    for (int b = t; b < nbins; b += kLanes) lut[b] = static_cast<float>(mean + (b - half) * static_cast<double>(scale));
    return;
  }
  for (int b = 0; b < nbins; ++b) bin_sum[b][t] = 0.0;
  if (t < 16) count[t] = 0;
  __syncthreads();
  for (size_t i = t; i < len; i += kLanes) {
    const float cv = xc[i] - mu;
    const uint8_t code = Code(cv * inv + offset, nbins);
    codes[i] = code;
    bin_sum[code][t] += cv;
    atomicAdd(&count[code], 1ull);
  }
  for (int b = 0; b < nbins; ++b) {
    const double bs = BlockTreeReduce(bin_sum[b]);
    if (t == 0) {
      lut[b] = count[b] ? static_cast<float>(static_cast<double>(mu) + bs / count[b])
                        : static_cast<float>(mean + (b - half) * static_cast<double>(scale));
    }
  }
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
  lo = lo_s[0];
  hi = hi_s[0];
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
                                           float* sum) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    sum[i] += lut[(i / chunk) * nbins + codes[i]];
  }
}

size_t Chunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

}  // namespace

int StatQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lut, uint8_t* codes, void* stream) {
  if (!ValidCodeBits(bits) || chunk == 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  StatQuantizeKernel<<<static_cast<unsigned>(Chunks(n, chunk)), kLanes, 0, AsStream(stream)>>>(x, n, chunk, bits, lut,
                                                                                               codes);
  return LastError();
}

int LinearQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lo, float* step, uint8_t* codes,
                         void* stream) {
  if (!ValidCodeBits(bits) || chunk == 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  LinearQuantizeKernel<<<static_cast<unsigned>(Chunks(n, chunk)), kLanes, 0, AsStream(stream)>>>(x, n, chunk, bits, lo,
                                                                                                 step, codes);
  return LastError();
}

int DequantizeAccumulateChunks(const float* lut, const uint8_t* codes, size_t n, size_t chunk, int bits, float* sum,
                               void* stream) {
  if (!ValidCodeBits(bits) || chunk == 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  DequantizeAccumulateKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(lut, codes, n, chunk, NumBins(bits), sum);
  return LastError();
}

int DeviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace muloco::kernels::cuda
