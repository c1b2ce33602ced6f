// Seeded subsets of chunks: the positions a codec's `keep` option sends codes for. Chunk c
// (len elements) of a segment keeps m = min(k, len) positions, element t of the subset being
// (a + t * q) mod len, where a and q come from splitmix64 of (seed, c): a in [0, len), q in
// [1, len) coprime to len (the first such odd number from a random start; 1 for len 1), so the
// positions are distinct and spread over the chunk. Both ends of a link compute them from the
// seed alone, on any backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace muloco::kernels {

struct SubsetStep {
  uint64_t a = 0, q = 1;
};

MULOCO_HOST_DEVICE inline uint64_t Gcd(uint64_t a, uint64_t b) {
  while (b != 0) {
    const uint64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// REQUIRES: len >= 1.
MULOCO_HOST_DEVICE inline SubsetStep SubsetOf(uint32_t seed, uint64_t c, uint64_t len) {
  const uint64_t h = SplitMix64((uint64_t{seed} << 32) ^ SplitMix64(c));
  SubsetStep s;
  s.a = h % len;
  uint64_t q = (SplitMix64(h) % len) | 1;  // odd: coprime to a power of two at once
  if (q >= len) q = 1;
  while (Gcd(q, len) != 1) q = q + 2 < len ? q + 2 : 1;
  s.q = q;
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
