// Quantization of one chunk of fp32 values to b-bit codes (b in {1, 2, 4, 8}), on raw
// buffers. Both quantizers produce a decode table (lut, 2^b floats): decoding is lut[code].
//
// Statistical (MuLoCo / SparseLoCo): mu = mean(x), c = x - mu, sigma = std(c) (population),
// scale = 6 sigma / nbins, code = clamp(rint(c / scale + nbins / 2), 0, nbins - 1)
// (rint: round half to even). lut[b] = mu + mean of the c in bin b; for empty bins, and for
// every bin at 8 bits, the bin centre mu + (b - nbins/2) * scale. sigma = 0: every code is
// nbins/2 and lut[nbins/2] = mu.
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

namespace cpu {

// REQUIRES: ValidCodeBits(bits); lut has NumBins(bits) floats, codes n bytes.
void StatQuantize(const float* x, size_t n, int bits, float* lut, uint8_t* codes);
// Linear: writes *lo and *step; the table is LinearTable(lo, step).
void LinearQuantize(const float* x, size_t n, int bits, float* lo, float* step, uint8_t* codes);

// sum[i] += lut[codes[i]]. REQUIRES: every code < the lut's size.
void DequantizeAccumulate(const float* lut, const uint8_t* codes, size_t n, float* sum);

}  // namespace cpu
}  // namespace muloco::kernels
