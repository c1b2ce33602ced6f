// Seeded subsets of chunks: the positions a codec's `keep` option sends codes for. Chunk c
// (len elements) of a segment keeps m = min(k, len) positions, element t of the subset being
// (a + t * q) mod len, where a and q come from splitmix64 of (seed, c): a in [0, len), q odd
// (so coprime to len) when len is a power of two, else 1 (a window that wraps). The positions
// are distinct, and both ends of a link compute them from the seed alone, on any backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace muloco::kernels {

struct SubsetStep {
  uint64_t a = 0, q = 1;
};

MULOCO_HOST_DEVICE inline SubsetStep SubsetOf(uint32_t seed, uint64_t c, uint64_t len) {
  const uint64_t h = SplitMix64((uint64_t{seed} << 32) ^ SplitMix64(c));
  SubsetStep s;
  s.a = h % len;
  if ((len & (len - 1)) == 0) s.q = (SplitMix64(h) % len) | 1;
  return s;
}

// Position (within its chunk) of element t of the subset. REQUIRES: t < len.
MULOCO_HOST_DEVICE inline uint32_t SubsetIndex(const SubsetStep& s, uint64_t t, uint64_t len) {
  return static_cast<uint32_t>((s.a + (t * s.q) % len) % len);
}

}  // namespace muloco::kernels

namespace muloco::kernels::cpu {

// The subsets of a chunked segment of n elements, chunk after chunk (min(k, length) positions
// each, in subset order): the idx layout of GatherChunks / ScatterAccumulateChunks
// (kernels/topk.h). REQUIRES: 1 <= k <= chunk.
void SubsetChunks(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx);

}  // namespace muloco::kernels::cpu
