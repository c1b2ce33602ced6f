// 64-bit checksums (xxHash64) of parameter buffers and payload bodies.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco {

// xxh64 of the raw bytes; `seed` separates uses (models vs payloads).
uint64_t Checksum64(const void* data, size_t bytes, uint64_t seed = 0);

// xxh64 of n fp32 parameters as stored in memory (little-endian on every supported host).
inline uint64_t ParamChecksum(const float* params, size_t n) {
  return Checksum64(params, n * sizeof(float), /*seed=*/0x6d756c6f636fULL);
}

}  // namespace muloco
