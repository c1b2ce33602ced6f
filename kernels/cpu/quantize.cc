// CPU reference (and fast path) of the quantizers in kernels/quantize.h.
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/reduce.h"

namespace muloco::kernels::cpu {
namespace {

// Fixed-order sum and sum of squares (see reduce.h).
void Moments(const float* x, size_t n, double* sum, double* sumsq) {
  double s[kLanes] = {}, q[kLanes] = {};
  for (size_t base = 0; base < n; base += kLanes) {
    const size_t m = std::min<size_t>(kLanes, n - base);
    for (size_t j = 0; j < m; ++j) {
      const double v = x[base + j];
      s[j] += v;
      q[j] += v * v;
    }
  }
  *sum = TreeReduce(s);
  *sumsq = TreeReduce(q);
}

inline uint8_t Code(float t, int nbins) {
  const float r = std::rint(t);  // round half to even (default rounding mode); inlined, unlike nearbyint
  return static_cast<uint8_t>(std::min(std::max(r, 0.0f), static_cast<float>(nbins - 1)));
}

}  // namespace

void StatQuantize(const float* x, size_t n, int bits, float* lut, uint8_t* codes) {
  const int nbins = NumBins(bits), half = nbins / 2;
  double sum = 0, sumsq = 0;
  Moments(x, n, &sum, &sumsq);
  const double mean = n ? sum / n : 0.0;
  const float mu = static_cast<float>(mean);
  const double var = n ? std::max(0.0, sumsq / n - mean * mean) : 0.0;
  const float scale = static_cast<float>(6.0 * std::sqrt(var) / nbins);
  if (!(scale > 0) || !std::isfinite(1.0f / scale)) {
    std::fill(lut, lut + nbins, mu);
    std::memset(codes, half, n);
    return;
  }
  const float inv = 1.0f / scale, offset = static_cast<float>(half);
  if (bits == 8) {
    for (size_t i = 0; i < n; ++i) codes[i] = Code((x[i] - mu) * inv + offset, nbins);
    for (int b = 0; b < nbins; ++b) lut[b] = static_cast<float>(mean + (b - half) * static_cast<double>(scale));
    return;
  }
  // Per-bin sums of c in fixed lane order; counts are exact in any order.
  double bin_sum[16][kLanes] = {};
  size_t count[16] = {};
  // Two passes: the code pass vectorises; the scatter into bins cannot.
  for (size_t i = 0; i < n; ++i) codes[i] = Code((x[i] - mu) * inv + offset, nbins);
  for (size_t base = 0; base < n; base += kLanes) {
    const size_t m = std::min<size_t>(kLanes, n - base);
    for (size_t j = 0; j < m; ++j) {
      const uint8_t q = codes[base + j];
      bin_sum[q][j] += x[base + j] - mu;
      ++count[q];
    }
  }
  for (int b = 0; b < nbins; ++b) {
    const double s = TreeReduce(bin_sum[b]);
    lut[b] = count[b] ? static_cast<float>(static_cast<double>(mu) + s / count[b])
                      : static_cast<float>(mean + (b - half) * static_cast<double>(scale));
  }
}

void LinearQuantize(const float* x, size_t n, int bits, float* lo_out, float* step_out, uint8_t* codes) {
  const int nbins = NumBins(bits);
  float lo = n ? x[0] : 0.0f, hi = lo;
  for (size_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float step = (hi - lo) / static_cast<float>(nbins - 1);
  *lo_out = lo;
  *step_out = step;
  if (!(step > 0) || !std::isfinite(1.0f / step)) {
    std::memset(codes, 0, n);
    return;
  }
  const float inv = 1.0f / step;
  for (size_t i = 0; i < n; ++i) codes[i] = Code((x[i] - lo) * inv, nbins);
}

void DequantizeAccumulate(const float* lut, const uint8_t* codes, size_t n, float* sum) {
  for (size_t i = 0; i < n; ++i) sum[i] += lut[codes[i]];
}

}  // namespace muloco::kernels::cpu
