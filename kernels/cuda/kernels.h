// CUDA versions of the compression kernels: the same functions as kernels/cpu, batched over
// the chunks of a buffer, producing the same bits (fixed-order reductions of reduce.h,
// no fused multiply-adds: built with -fmad=false). All pointers are device pointers; every
// launcher runs on the given stream (a cudaStream_t, passed as void* so this header needs
// no CUDA include), checks its launch and returns the error as a Status naming the kernel
// (asynchronous failures surface at a later launch or synchronisation).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace muloco::kernels::cuda {

// Number of CUDA devices (0 when there is none or no driver).
int DeviceCount();

// Per chunk of `chunk` elements (the last may be shorter): c = n_chunks = ceil(n / chunk).
// lut: c * 2^bits floats; codes: n bytes. REQUIRES: bits in {1, 2, 4, 8}.
absl::Status StatQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lut, uint8_t* codes,
                                void* stream);
// Same layout as StatQuantizeChunks. REQUIRES: bits in {1, 2, 4}.
absl::Status GaussianQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lut, uint8_t* codes,
                                    void* stream);
// lo, step: c floats each.
absl::Status LinearQuantizeChunks(const float* x, size_t n, size_t chunk, int bits, float* lo, float* step,
                                  uint8_t* codes, void* stream);
// sum[i] += factor * lut[(i / chunk) * 2^bits + codes[i]].
absl::Status DequantizeAccumulateChunks(const float* lut, const uint8_t* codes, size_t n, size_t chunk, int bits,
                                        float factor, float* sum, void* stream);
// The linear quantizer's decode from (lo, step) pairs: sum[i] += factor * (lo_c + code * step_c)
// with lo_c = lo_step[2c], step_c = lo_step[2c + 1] (kernels::LinearTable's arithmetic).
absl::Status DequantizeLinearChunks(const float* lo_step, const uint8_t* codes, size_t n, size_t chunk, float factor,
                                    float* sum, void* stream);
// out[i] = lut[codes[i]].
absl::Status Lookup(const float* lut, const uint8_t* codes, size_t n, float* out, void* stream);

// Bit packing, same layout as kernels/bitpack.h. REQUIRES: codes bits in {1, 2, 4, 8};
// index bits in 1..24.
absl::Status PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out, void* stream);
absl::Status UnpackCodes(const uint8_t* in, size_t n, int bits, uint8_t* codes, void* stream);
absl::Status PackIndices(const uint32_t* idx, size_t n, int bits, uint8_t* out, void* stream);

// Top-k per chunk, same selection and order as cpu::TopKChunk; idx holds min(k, len) entries
// per chunk, chunk after chunk. REQUIRES: chunk a power of two <= 4096, k <= chunk.
absl::Status TopKChunks(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx, void* stream);
// As cpu::GatherChunks and cpu::ScatterAccumulateChunks (kernels/topk.h). REQUIRES: 1 <= k <= chunk.
absl::Status GatherChunks(const float* x, size_t n, size_t chunk, size_t k, const uint32_t* idx, float* vals,
                          void* stream);
absl::Status ScatterAccumulateChunks(const float* vals, size_t n, size_t chunk, size_t k, const uint32_t* idx,
                                     float factor, float* sum, void* stream);
// As cpu::SubsetChunks (kernels/subset.h). REQUIRES: 1 <= k <= chunk.
absl::Status SubsetChunks(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx, void* stream);

// Signs and votes, as kernels/sign.h; scale: one MeanAbs per chunk.
absl::Status SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out, void* stream);
absl::Status MeanAbsChunks(const float* x, size_t n, size_t chunk, float* scale, void* stream);
// sum[i] += factor * (bit i ? scales[i / chunk] : -scales[i / chunk]).
absl::Status SignAccumulateChunks(const uint8_t* bits, const float* scales, size_t n, size_t chunk, float factor,
                                  float* sum, void* stream);
absl::Status VoteAccumulate(const uint8_t* bits, size_t n, int32_t* counts, void* stream);
absl::Status VoteSign(const int32_t* counts, size_t n, float* out, void* stream);

// e <- beta * e + delta.
absl::Status EfUpdate(float* e, const float* delta, size_t n, float beta, void* stream);
// out[i] = bf16(e[i]); e[i] -= out[i] (kernels/bf16.h).
absl::Status Bf16Encode(float* e, size_t n, uint16_t* out, void* stream);

}  // namespace muloco::kernels::cuda
