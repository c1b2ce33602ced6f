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

// mean, population variance and scale = 6 sigma / nbins of x[0..n).
struct ChunkStats {
  double mean, var;
  float mu, scale;
  bool flat;  // sigma is 0 (or too small to invert): every code is nbins/2, lut[] = mu
};
ChunkStats Stats(const float* x, size_t n, int nbins) {
  double sum = 0, sumsq = 0;
  Moments(x, n, &sum, &sumsq);
  ChunkStats st;
  st.mean = n ? sum / n : 0.0;
  st.mu = static_cast<float>(st.mean);
  st.var = n ? std::max(0.0, sumsq / n - st.mean * st.mean) : 0.0;
  st.scale = static_cast<float>(6.0 * std::sqrt(st.var) / nbins);
  st.flat = !(st.scale > 0) || !std::isfinite(1.0f / st.scale);
  return st;
}

// A flat chunk (sigma 0) gets code nbins/2 everywhere and a table of mu; returns st.flat.
bool FilledFlat(const ChunkStats& st, size_t n, int nbins, float* lut, uint8_t* codes) {
  if (!st.flat) return false;
  std::fill(lut, lut + nbins, st.mu);
  std::memset(codes, nbins / 2, n);
  return true;
}

// lut[b] = mu + mean of (x - mu) over the elements coded b (fixed lane order; counts are
// exact in any order), or fallback[b] when no element is.
void CentroidTable(const float* x, size_t n, float mu, const uint8_t* codes, int nbins, const float* fallback,
                   float* lut) {
  double bin_sum[16][kLanes];  // only the nbins rows in use are cleared (32 KiB in all)
  size_t count[16] = {};
  for (int b = 0; b < nbins; ++b) std::fill(bin_sum[b], bin_sum[b] + kLanes, 0.0);
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
    lut[b] = count[b] ? static_cast<float>(static_cast<double>(mu) + s / count[b]) : fallback[b];
  }
}

}  // namespace

void StatQuantize(const float* x, size_t n, int bits, float* lut, uint8_t* codes) {
  const int nbins = NumBins(bits), half = nbins / 2;
  const ChunkStats st = Stats(x, n, nbins);
  if (FilledFlat(st, n, nbins, lut, codes)) return;
  const float mu = st.mu, inv = 1.0f / st.scale, offset = static_cast<float>(half);
  // The code pass vectorises; the scatter into bins (CentroidTable) cannot.
  for (size_t i = 0; i < n; ++i) codes[i] = Code((x[i] - mu) * inv + offset, nbins);
  float centre[256];
  for (int b = 0; b < nbins; ++b) centre[b] = static_cast<float>(st.mean + (b - half) * static_cast<double>(st.scale));
  if (bits == 8) {
    std::copy(centre, centre + nbins, lut);  // 8 bits: bin centres, no centroids
    return;
  }
  CentroidTable(x, n, mu, codes, nbins, centre, lut);
}

void GaussianQuantize(const float* x, size_t n, int bits, float* lut, uint8_t* codes) {
  const int nbins = NumBins(bits);
  const ChunkStats st = Stats(x, n, nbins);
  if (FilledFlat(st, n, nbins, lut, codes)) return;
  const GaussianBins g = GaussianBinsFor(bits);
  const double sigma = std::sqrt(st.var);
  float thr[15], level[16];
  for (int b = 0; b + 1 < nbins; ++b) thr[b] = static_cast<float>(g.threshold[b] * sigma);
  for (int b = 0; b < nbins; ++b) level[b] = static_cast<float>(st.mean + g.level[b] * sigma);
  const float mu = st.mu;
  if (bits == 2) {  // the common case, branch-free
    const float lo = thr[0], mid = thr[1], hi = thr[2];
    for (size_t i = 0; i < n; ++i) {
      const float c = x[i] - mu;
      codes[i] = static_cast<uint8_t>((c > lo) + (c > mid) + (c > hi));
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float c = x[i] - mu;
      uint8_t q = 0;
      for (int b = 0; b + 1 < nbins; ++b) q += c > thr[b];
      codes[i] = q;
    }
  }
  CentroidTable(x, n, mu, codes, nbins, level, lut);
}

void LinearQuantize(const float* x, size_t n, int bits, float* lo_out, float* step_out, uint8_t* codes) {
  const int nbins = NumBins(bits);
  float lo = n ? x[0] : 0.0f, hi = lo;
  for (size_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo += 0.0f;  // -0 -> +0, so that which of two equal zeros came first does not matter (CUDA)
  hi += 0.0f;
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
