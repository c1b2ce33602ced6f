// What the CPU and CUDA kernels share at the source level: the host/device qualifier for
// inline functions both compile, and splitmix64, the seeded hash behind sign-tie coins and
// `keep` subsets (kernels/sign.h, kernels/subset.h).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MULOCO_HOST_DEVICE __host__ __device__
#else
#define MULOCO_HOST_DEVICE
#endif

namespace muloco::kernels {

// splitmix64's output function of the state `z` (Steele, Lea, Flood 2014).
MULOCO_HOST_DEVICE inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace muloco::kernels
