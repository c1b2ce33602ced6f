// Bit packing, LSB first: element i occupies bits [i*b, (i+1)*b) of the little-endian
// byte stream. Codes (b in {1, 2, 4, 8}, one byte each) and indices (b in 1..24).
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco::kernels {

inline constexpr size_t PackedBytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

namespace cpu {

// REQUIRES: out has PackedBytes(n, bits) bytes; codes < 2^bits. Padding bits are zero.
void PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out);
void UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes);
void PackIndices(const uint32_t* idx, size_t n, int bits, uint8_t* out);
void UnpackIndices(const uint8_t* in, size_t n, int bits, uint32_t* idx);

}  // namespace cpu
}  // namespace muloco::kernels
