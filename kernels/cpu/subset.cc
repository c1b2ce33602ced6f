// The CPU's seeded chunk subsets (see kernels/subset.h).
#include "kernels/subset.h"

#include <algorithm>

namespace muloco::kernels::cpu {

void SubsetChunks(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx) {
  for (size_t c = 0, off = 0; off < n; ++c, off += chunk) {
    const size_t len = std::min(chunk, n - off), m = std::min(k, len);
    const SubsetStep s = SubsetOf(seed, c, len);
    for (size_t t = 0; t < m; ++t) *idx++ = SubsetIndex(s, t, len);
  }
}

}  // namespace muloco::kernels::cpu
