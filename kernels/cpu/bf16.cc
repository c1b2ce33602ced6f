// CPU bf16 encode (with the rounding error kept) and decode-accumulate (see kernels/bf16.h).
#include "kernels/bf16.h"

#include <cstring>

namespace muloco::kernels::cpu {

namespace {
float AsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

void Bf16Encode(float* e, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, e + i, 4);
    out[i] = Bf16FromBits(u);
    e[i] -= AsFloat(Bf16ToBits(out[i]));
  }
}

void Bf16Accumulate(const uint16_t* in, size_t n, float* sum) {
  for (size_t i = 0; i < n; ++i) sum[i] += AsFloat(Bf16ToBits(in[i]));
}

}  // namespace muloco::kernels::cpu
