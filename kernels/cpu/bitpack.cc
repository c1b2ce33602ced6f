// CPU bit packing (see kernels/bitpack.h).
#include "kernels/bitpack.h"

#include <cstring>

namespace muloco::kernels::cpu {

void PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  if (bits == 8) {
    std::memcpy(out, codes, n);
    return;
  }
  const int per_byte = 8 / bits;
  const size_t full = n / per_byte;
  for (size_t j = 0; j < full; ++j) {
    const uint8_t* c = codes + j * per_byte;
    uint8_t v = 0;
    for (int t = 0; t < per_byte; ++t) v |= static_cast<uint8_t>(c[t] << (t * bits));
    out[j] = v;
  }
  if (full * per_byte < n) {
    uint8_t v = 0;
    for (size_t i = full * per_byte; i < n; ++i) v |= static_cast<uint8_t>(codes[i] << ((i - full * per_byte) * bits));
    out[full] = v;
  }
}

void UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  if (bits == 8) {
    std::memcpy(codes, in, n);
    return;
  }
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  const size_t full = n / per_byte;
  for (size_t j = 0; j < full; ++j) {  // per byte: no division per element
    const uint8_t v = in[j];
    uint8_t* c = codes + j * per_byte;
    for (int t = 0; t < per_byte; ++t) c[t] = (v >> (t * bits)) & mask;
  }
  for (size_t i = full * per_byte; i < n; ++i) codes[i] = (in[full] >> ((i - full * per_byte) * bits)) & mask;
}

void PackIndices(const uint32_t* idx, size_t n, int bits, uint8_t* out) {
  uint64_t acc = 0;
  int filled = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>(idx[i]) << filled;
    filled += bits;
    while (filled >= 8) {
      out[o++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
  if (filled > 0) out[o] = static_cast<uint8_t>(acc);
}

void UnpackIndices(const uint8_t* in, size_t n, int bits, uint32_t* idx) {
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t acc = 0;
  int filled = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    while (filled < bits) {
      acc |= static_cast<uint64_t>(in[o++]) << filled;
      filled += 8;
    }
    idx[i] = static_cast<uint32_t>(acc & mask);
    acc >>= bits;
    filled -= bits;
  }
}

}  // namespace muloco::kernels::cpu
