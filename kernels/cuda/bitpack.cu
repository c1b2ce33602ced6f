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

// One thread per output byte: bit g of the stream is bit (g % bits) of index g / bits.
__global__ void PackIndicesKernel(const uint32_t* idx, size_t n, int bits, uint8_t* out, size_t bytes) {
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < bytes; j += size_t{gridDim.x} * blockDim.x) {
    uint8_t v = 0;
    for (int t = 0; t < 8; ++t) {
      const size_t g = j * 8 + t, i = g / bits;
      if (i < n) v |= static_cast<uint8_t>(((idx[i] >> (g % bits)) & 1u) << t);
    }
    out[j] = v;
  }
}

}  // namespace

absl::Status PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out, void* stream) {
  if (!ValidCodeBits(bits)) return Invalid(__func__);
  const size_t bytes = PackedBytes(n, bits);
  if (bytes == 0) return absl::OkStatus();
  PackKernel<<<GridFor(bytes, 256), 256, 0, AsStream(stream)>>>(codes, n, bits, out, bytes);
  return Launched(__func__);
}

absl::Status UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes, void* stream) {
  if (!ValidCodeBits(bits)) return Invalid(__func__);
  if (n == 0) return absl::OkStatus();
  UnpackKernel<<<GridFor(n, 256), 256, 0, AsStream(stream)>>>(in, n, bits, codes);
  return Launched(__func__);
}

absl::Status PackIndices(const uint32_t* idx, size_t n, int bits, uint8_t* out, void* stream) {
  if (bits < 1 || bits > 24) return Invalid(__func__);
  const size_t bytes = PackedBytes(n, bits);
  if (bytes == 0) return absl::OkStatus();
  PackIndicesKernel<<<GridFor(bytes, 256), 256, 0, AsStream(stream)>>>(idx, n, bits, out, bytes);
  return Launched(__func__);
}

}  // namespace muloco::kernels::cuda
