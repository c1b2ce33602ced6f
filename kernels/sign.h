// Signs, 1 bit per element (bit set: x >= 0, so +0 and -0 count as positive), and majority
// votes over workers: counts[i] += +1 or -1 per worker; the vote is sign(count) with a tie
// (count 0, possible for an even number of workers) giving 0, i.e. no move.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco::kernels::cpu {

// REQUIRES: out has PackedBytes(n, 1) bytes. Padding bits are zero.
void SignPack(const float* x, size_t n, uint8_t* out);
// Mean of |x| with the fixed-order reduction (the scale of a sign payload); 0 for n = 0.
float MeanAbs(const float* x, size_t n);
// sum[i] += bit ? scale : -scale.
void SignAccumulate(const uint8_t* bits, size_t n, float scale, float* sum);
void VoteAccumulate(const uint8_t* bits, size_t n, int32_t* counts);
void VoteSign(const int32_t* counts, size_t n, float* out);

}  // namespace muloco::kernels::cpu
