// Top-k by magnitude within one chunk. The selection is unique: larger |x| first, and among
// equal magnitudes the lower index; indices come out ascending. Any backend gives the same.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco::kernels::cpu {

// REQUIRES: k <= n; idx has k slots.
void TopKChunk(const float* x, size_t n, size_t k, uint32_t* idx);

// The kept values of a chunked top-k over n elements (chunks of `chunk`, min(k, length)
// indices each, chunk after chunk, as TopKChunk writes them): vals[t] = x[chunk start + idx[t]].
void GatherChunks(const float* x, size_t n, size_t chunk, size_t k, const uint32_t* idx, float* vals);
// The reverse: sum[chunk start + idx[t]] += factor * vals[t].
void ScatterAccumulateChunks(const float* vals, size_t n, size_t chunk, size_t k, const uint32_t* idx, float factor,
                             float* sum);

}  // namespace muloco::kernels::cpu
