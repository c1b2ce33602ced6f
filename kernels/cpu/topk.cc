// CPU top-k per chunk (see kernels/topk.h).
#include "kernels/topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

namespace muloco::kernels::cpu {

// One 64-bit key per element, (|x| bits << 32) | ~index: for finite x, |x|'s bit pattern
// orders like its value, so the largest keys are the larger magnitudes, lower index first.
void TopKChunk(const float* x, size_t n, size_t k, uint32_t* idx) {
  if (k == 0) return;
  thread_local std::vector<uint64_t> keys;
  keys.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t mag;
    const float a = std::fabs(x[i]);
    std::memcpy(&mag, &a, 4);
    keys[i] = (static_cast<uint64_t>(mag) << 32) | static_cast<uint32_t>(~i);
  }
  if (k < n) std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<uint64_t>());
  for (size_t j = 0; j < k; ++j) idx[j] = ~static_cast<uint32_t>(keys[j]);
  std::sort(idx, idx + k);
}

void GatherChunks(const float* x, size_t n, size_t chunk, size_t k, const uint32_t* idx, float* vals) {
  for (size_t off = 0, t = 0; off < n; off += chunk) {
    for (size_t j = 0, kept = std::min(k, std::min(chunk, n - off)); j < kept; ++j, ++t) vals[t] = x[off + idx[t]];
  }
}

void ScatterAccumulateChunks(const float* vals, size_t n, size_t chunk, size_t k, const uint32_t* idx, float factor,
                             float* sum) {
  for (size_t off = 0, t = 0; off < n; off += chunk) {
    for (size_t j = 0, kept = std::min(k, std::min(chunk, n - off)); j < kept; ++j, ++t) sum[off + idx[t]] += factor * vals[t];
  }
}

}  // namespace muloco::kernels::cpu
