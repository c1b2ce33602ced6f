// Top-k by magnitude within one chunk. The selection is unique: larger |x| first, and among
// equal magnitudes the lower index; indices come out ascending. Any backend gives the same.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco::kernels::cpu {

// REQUIRES: k <= n; idx has k slots.
void TopKChunk(const float* x, size_t n, size_t k, uint32_t* idx);

}  // namespace muloco::kernels::cpu
