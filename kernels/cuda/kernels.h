// CUDA versions of the compression kernels: the same functions as kernels/cpu, batched over
// the chunks of a buffer, producing the same bits (fixed-order reductions of reduce.h,
// no fused multiply-adds: built with -fmad=false). All pointers are device pointers; every
// launcher takes a stream (a cudaStream_t, passed as void* so this header needs no CUDA
// include) and returns 0 or a cudaError_t value (ErrorString explains it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco::kernels::cuda {

// Number of CUDA devices (0 when there is none or no driver).
int DeviceCount();
const char* ErrorString(int error);

// Per chunk of `chunk` elements (the last may be shorter): c = n_chunks = ceil(n / chunk).
// lut: c * 2^bits floats; codes: n bytes. REQUIRES: bits in {1, 2, 4, 8}.
int StatQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lut, uint8_t* codes, void* stream);
// Same layout as StatQuantizeChunks. REQUIRES: bits in {1, 2, 4}.
int GaussianQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lut, uint8_t* codes,
                           void* stream);
// lo, step: c floats each.
int LinearQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lo, float* step, uint8_t* codes,
                         void* stream);
// sum[i] += lut[(i / chunk) * 2^bits + codes[i]].
int DequantizeAccumulateChunks(const float* lut, const uint8_t* codes, size_t n, size_t chunk, int bits, float* sum,
                               void* stream);

// Bit packing, same layout as kernels/bitpack.h. REQUIRES: codes bits in {1, 2, 4, 8}.
int PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out, void* stream);
int UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes, void* stream);

// Top-k per chunk, same selection and order as cpu::TopKChunk; idx holds min(k, len) entries
// per chunk, chunk after chunk. REQUIRES: chunk a power of two <= 4096, k <= chunk.
int TopKChunks(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx, void* stream);

// Signs and votes, as kernels/sign.h; scale: one MeanAbs per chunk.
int SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out, void* stream);
int MeanAbsChunks(const float* x, size_t n, size_t chunk, float* scale, void* stream);
int VoteAccumulate(const uint8_t* bits, size_t n, int32_t* counts, void* stream);
int VoteSign(const int32_t* counts, size_t n, float* out, void* stream);

// e <- beta * e + delta.
int EfUpdate(float* e, const float* delta, size_t n, float beta, void* stream);

}  // namespace muloco::kernels::cuda
