// Error-feedback accumulator update e <- beta * e + delta (the first pass of a fused
// compress step; the codec then encodes e and subtracts the decoded payload chunk by chunk
// while the chunk is still in cache).
#pragma once

#include <cstddef>

namespace muloco::kernels::cpu {

void EfUpdate(float* e, const float* delta, size_t n, float beta);

}  // namespace muloco::kernels::cpu
