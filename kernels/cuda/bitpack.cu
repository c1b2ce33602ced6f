// CUDA bit packing: one thread per output byte (pack) or element (unpack); layout of
// kernels/bitpack.h.
#include "kernels/bitpack.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/quantize.h"

namespace muloco::kernels::cuda {
namespace {

__global__ void PackKernel(const uint8_t* codes, size_t n, int bits, uint8_t* out, size_t bytes) {
  const int per_byte = 8 / bits;
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < bytes; j += size_t{gridDim.x} * blockDim.x) {
    uint8_t v = 0;
    for (int t = 0; t < per_byte; ++t) {
      const size_t i = j * per_byte + t;
      if (i < n) v |= static_cast<uint8_t>(codes[i] << (t * bits));
    }
    out[j] = v;
  }
}

__global__ void UnpackKernel(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    codes[i] = (in[i / per_byte] >> ((i % per_byte) * bits)) & mask;
  }
}

}  // namespace

int PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out, void* stream) {
  if (!ValidCodeBits(bits)) return static_cast<int>(cudaErrorInvalidValue);
  const size_t bytes = PackedBytes(n, bits);
  if (bytes == 0) return 0;
  PackKernel<<<GridFor(bytes, 256), 256, 0, AsStream(stream)>>>(codes, n, bits, out, bytes);
  return LastError();
}

int UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes, void* stream) {
  if (!ValidCodeBits(bits)) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  UnpackKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(in, n, bits, codes);
  return LastError();
}

}  // namespace muloco::kernels::cuda
