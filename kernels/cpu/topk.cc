// CPU top-k per chunk (see kernels/topk.h).
#include "kernels/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace muloco::kernels::cpu {

void TopKChunk(const float* x, size_t n, size_t k, uint32_t* idx) {
  if (k == 0) return;
  thread_local std::vector<uint32_t> order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0u);
  auto before = [x](uint32_t a, uint32_t b) {
    const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa > fb || (fa == fb && a < b);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), before);
  std::copy(order.begin(), order.begin() + k, idx);
  std::sort(idx, idx + k);
}

}  // namespace muloco::kernels::cpu
