// Quantization of one chunk of fp32 values to b-bit codes (b in {1, 2, 4, 8}), on raw
// buffers. Both quantizers produce a decode table (lut, 2^b floats): decoding is lut[code].
//
// Statistical (MuLoCo / SparseLoCo): mu = mean(x), c = x - mu, sigma = std(c) (population),
// scale = 6 sigma / nbins, code = clamp(rint(c / scale + nbins / 2), 0, nbins - 1)
// (rint: round half to even). lut[b] = mu + mean of the c in bin b; for empty bins, and for
// every bin at 8 bits, the bin centre mu + (b - nbins/2) * scale. sigma = 0: every code is
// nbins/2 and lut[nbins/2] = mu.
// Gaussian (Lloyd–Max; our default for 2 bits): mu, sigma as above; code = number of the
// Lloyd–Max thresholds for N(0,1) (GaussianBinsFor) times sigma that c exceeds; lut as the
// statistical quantizer's, with mu + level * sigma for empty bins. Symmetric bins, centroid
// decode: 2-bit MSE 0.1175 sigma^2 on Gaussian data (0.179 statistical, ~0.29 linear at
// chunk 256). bits in {1, 2, 4}.
// Linear: lo = min(x), step = (max - min) / (nbins - 1), code = clamp(rint((x - lo) / step)),
// lut[b] = lo + b * step (step = 0: all codes 0).
// Means and deviations use the fixed-order reduction of reduce.h (same bits on CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco::kernels {

inline constexpr int NumBins(int bits) { return 1 << bits; }
// lut[b] = lo + b * step for every bin (the linear quantizer's decode table).
inline void LinearTable(float lo, float step, int bits, float* lut) {
  for (int b = 0; b < NumBins(bits); ++b) lut[b] = lo + static_cast<float>(b) * step;
}
inline constexpr bool ValidCodeBits(int bits) { return bits == 1 || bits == 2 || bits == 4 || bits == 8; }
inline constexpr bool ValidGaussianBits(int bits) { return bits == 1 || bits == 2 || bits == 4; }

// Lloyd–Max quantizer of N(0,1) (J. Max, 1960): 2^bits reconstruction levels and the
// 2^bits - 1 thresholds between them (midpoints of neighbouring levels), both ascending.
struct GaussianBins {
  int count = 0;  // levels
  double threshold[15] = {};
  double level[16] = {};
};
// REQUIRES: ValidGaussianBits(bits).
inline GaussianBins GaussianBinsFor(int bits) {
  static constexpr double k1[] = {0.7979};
  static constexpr double k2[] = {0.4528, 1.5104};
  static constexpr double k4[] = {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326};
  const double* pos = bits == 1 ? k1 : bits == 2 ? k2 : k4;
  GaussianBins g;
  g.count = NumBins(bits);
  const int half = g.count / 2;
  for (int i = 0; i < half; ++i) {
    g.level[half + i] = pos[i];
    g.level[half - 1 - i] = -pos[i];
  }
  for (int b = 0; b + 1 < g.count; ++b) g.threshold[b] = 0.5 * (g.level[b] + g.level[b + 1]);
  return g;
}

namespace cpu {

// REQUIRES: ValidCodeBits(bits); lut has NumBins(bits) floats, codes n bytes.
void StatQuantize(const float* x, size_t n, int bits, float* lut, uint8_t* codes);
// REQUIRES: ValidGaussianBits(bits); lut has NumBins(bits) floats, codes n bytes.
void GaussianQuantize(const float* x, size_t n, int bits, float* lut, uint8_t* codes);
// Linear: writes *lo and *step; the table is LinearTable(lo, step).
void LinearQuantize(const float* x, size_t n, int bits, float* lo, float* step, uint8_t* codes);

// sum[i] += lut[codes[i]]. REQUIRES: every code < the lut's size.
void DequantizeAccumulate(const float* lut, const uint8_t* codes, size_t n, float* sum);

}  // namespace cpu
}  // namespace muloco::kernels
