// bf16 (the top 16 bits of an fp32, rounded to nearest even) for the dense-bf16 codec: the
// rounding on raw bits is shared by the CPU and CUDA kernels, so both give the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace muloco::kernels {

// The bf16 nearest to the fp32 with bit pattern u (round half to even). REQUIRES: finite.
MULOCO_HOST_DEVICE inline uint16_t Bf16FromBits(uint32_t u) {
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// The fp32 bit pattern of a bf16.
MULOCO_HOST_DEVICE inline uint32_t Bf16ToBits(uint16_t h) { return static_cast<uint32_t>(h) << 16; }

namespace cpu {
// out[i] = bf16(e[i]); e[i] -= out[i] (the rounding error stays in e). REQUIRES: e finite.
void Bf16Encode(float* e, size_t n, uint16_t* out);
// sum[i] += in[i].
void Bf16Accumulate(const uint16_t* in, size_t n, float* sum);
}  // namespace cpu

}  // namespace muloco::kernels
