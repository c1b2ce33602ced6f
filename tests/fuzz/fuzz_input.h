// Layout of a decoder fuzz input, shared by the fuzzer and the seed generator.
//
// An input is 2 control bytes followed by the payload handed to DecodeAccumulate:
//   control = u16 little-endian:  bit 0  recompute the body checksum (offset 24)
//                                 bit 1  rewrite the body-size field (offset 16)
//                                 bit 2  rewrite the element-count field (offset 8) to n
//                                 bits 3..15 (mod kMaxElements): n, the expected element count
// With no fix-up bits the payload is decoded exactly as given (random bytes, truncation, bad
// checksums). The fix-ups let mutations of a valid payload get past the checksum and the
// header to the segment table and the data, where the interesting validation lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codec/checksum.h"
#include "codec/codec.h"

namespace muloco::fuzz {

inline constexpr size_t kControlBytes = 2;
inline constexpr uint32_t kMaxElements = 5000;
inline constexpr uint16_t kFixChecksum = 1, kFixBodySize = 2, kFixElements = 4, kFixAll = 7;
// Seed of the body checksum (see the payload format in codec/codec.h). The fuzzer checks
// at start-up that a payload it re-checksums still decodes, so a drift here is caught.
inline constexpr uint64_t kBodySeed = 0x626f6479ULL;

inline uint16_t Control(uint16_t fixes, uint32_t n) { return static_cast<uint16_t>((n << 3) | (fixes & 7)); }
inline uint32_t ElementsOf(uint16_t control) { return (control >> 3) % kMaxElements; }

// Applies the fix-ups the control asks for to a payload of `size` bytes, in place.
inline void ApplyFixes(uint16_t control, uint32_t n, char* p, size_t size) {
  if (size < kPayloadHeaderBytes) return;
  const uint64_t body = size - kPayloadHeaderBytes;
  const uint64_t elements = n;
  if (control & kFixElements) std::memcpy(p + 8, &elements, 8);
  if (control & kFixBodySize) std::memcpy(p + 16, &body, 8);
  if (control & kFixChecksum) {
    const uint64_t sum = Checksum64(p + kPayloadHeaderBytes, body, kBodySeed);
    std::memcpy(p + 24, &sum, 8);
  }
}

}  // namespace muloco::fuzz
