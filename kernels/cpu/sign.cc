// CPU sign packing and vote counting (see kernels/sign.h).
#include "kernels/sign.h"

#include <algorithm>
#include <cmath>

#include "kernels/reduce.h"

namespace muloco::kernels::cpu {

namespace {
inline uint8_t SignBit(float v, uint64_t key) { return v == 0.0f ? TieBit(key) : static_cast<uint8_t>(v > 0.0f); }
}  // namespace

void SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out) {
  const size_t full = n / 8;
  for (size_t j = 0; j < full; ++j) {
    const float* v = x + 8 * j;
    uint8_t b = 0;
    for (int t = 0; t < 8; ++t) b |= SignBit(v[t], seed + 8 * j + t) << t;
    out[j] = b;
  }
  if (full * 8 < n) {
    uint8_t b = 0;
    for (size_t i = full * 8; i < n; ++i) b |= SignBit(x[i], seed + i) << (i - full * 8);
    out[full] = b;
  }
}

float MeanAbs(const float* x, size_t n) {
  if (n == 0) return 0.0f;
  double lanes[kLanes] = {};
  for (size_t base = 0; base < n; base += kLanes) {
    const size_t m = std::min<size_t>(kLanes, n - base);
    for (size_t j = 0; j < m; ++j) lanes[j] += std::fabs(static_cast<double>(x[base + j]));
  }
  return static_cast<float>(TreeReduce(lanes) / n);
}

// Branch-free: the bits are random, so a branch per element would mispredict half the time.
void SignAccumulate(const uint8_t* bits, size_t n, float scale, float* sum) {
  const float pm[2] = {-scale, scale};
  for (size_t i = 0; i < n; ++i) sum[i] += pm[(bits[i / 8] >> (i % 8)) & 1];
}

void VoteAccumulate(const uint8_t* bits, size_t n, int32_t* counts) {
  for (size_t i = 0; i < n; ++i) counts[i] += 2 * ((bits[i / 8] >> (i % 8)) & 1) - 1;
}

void VoteSign(const int32_t* counts, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = counts[i] > 0 ? 1.0f : (counts[i] < 0 ? -1.0f : 0.0f);
}

}  // namespace muloco::kernels::cpu
