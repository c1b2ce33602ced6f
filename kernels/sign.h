// Signs, 1 bit per element (bit set: x > 0), and majority votes over workers: counts[i] +=
// +1 or -1 per worker; the vote is sign(count) with a tie (count 0, possible for an even
// number of workers) giving 0, i.e. no move. An exactly zero element (+0 or -0) has no sign:
// its bit is a coin flip, TieBit(seed + i), so that workers with different seeds do not all
// vote the same way for it (a fixed choice moved every such coordinate by -lr each round).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace muloco::kernels {

// The coin for a zero element: bit 0 of splitmix64(key) (the same on CPU and CUDA).
MULOCO_HOST_DEVICE inline uint8_t TieBit(uint64_t key) { return static_cast<uint8_t>(SplitMix64(key) & 1); }

}  // namespace muloco::kernels

namespace muloco::kernels::cpu {

// REQUIRES: out has PackedBytes(n, 1) bytes. Padding bits are zero. Element i's coin (if it
// is zero) is TieBit(seed + i).
void SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out);
// Mean of |x| with the fixed-order reduction (the scale of a sign payload); 0 for n = 0.
float MeanAbs(const float* x, size_t n);
// sum[i] += bit ? scale : -scale.
void SignAccumulate(const uint8_t* bits, size_t n, float scale, float* sum);
void VoteAccumulate(const uint8_t* bits, size_t n, int32_t* counts);
void VoteSign(const int32_t* counts, size_t n, float* out);

}  // namespace muloco::kernels::cpu
