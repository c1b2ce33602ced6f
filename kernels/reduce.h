// Fixed-order reductions shared by the CPU and CUDA kernels, so both produce the same bits:
// lane j (of kLanes) sums elements j, j + kLanes, ... in double, then lanes are combined by
// a pairwise tree (lane i += lane i + s for s = kLanes/2, ..., 1). A CUDA block of kLanes
// threads does exactly this.
#pragma once

#include <cstddef>

namespace muloco::kernels {

inline constexpr int kLanes = 256;

// Tree-combines lanes[0..kLanes) in place; returns lanes[0].
inline double TreeReduce(double* lanes) {
  for (int s = kLanes / 2; s > 0; s /= 2)
    for (int i = 0; i < s; ++i) lanes[i] += lanes[i + s];
  return lanes[0];
}

}  // namespace muloco::kernels
