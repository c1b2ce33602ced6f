// Where the codec's encoder runs: the kernels of one device, behind one interface. The codec
// (codec.cc) writes each scheme's encoding once, as a sequence of these calls; the CPU
// backend runs them with kernels/cpu, the CUDA backend with kernels/cuda on one stream, and
// both give the same payload bytes. Every float/code/index pointer is the backend's memory
// (host memory for the CPU, device memory for CUDA), from Scratch or the caller's buffers;
// only Emit moves bytes into the host payload. Decoding always runs on the host (codec.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muloco {

enum class Quantizer { kStat, kGaussian, kLinear };

class CodecBackend {
 public:
  virtual ~CodecBackend() = default;
  virtual std::string Name() const = 0;
  // Whether pointers handed to this backend are host memory.
  virtual bool OnHost() const = 0;
  // True when Encode can use this backend for a top-k chunk of this size.
  virtual bool SupportsTopKChunk(size_t chunk) const = 0;

  // Backend memory for the encoder's temporaries: one buffer per slot (and per calling
  // thread on the CPU), grown as needed, valid until the next call for the same slot.
  virtual absl::StatusOr<void*> Scratch(int slot, size_t bytes) = 0;
  // A payload of `bytes` bytes at `out` (host memory) is being written: Emit copies `bytes`
  // bytes of backend memory to out + offset (any alignment); EndBody returns once every Emit
  // has landed in out. The CPU backend keeps no state between these calls, so payloads may
  // be encoded on several threads at once; a CUDA backend stages one payload at a time.
  virtual absl::Status BeginBody(char* out, size_t bytes) = 0;
  virtual absl::Status Emit(char* out, size_t offset, const void* src, size_t bytes) = 0;
  virtual absl::Status EndBody(char* out) = 0;
  // The same as Emit for `bytes` bytes of host memory at src (a value the encoder computed
  // on the host, e.g. a seed).
  virtual absl::Status EmitHost(char* out, size_t offset, const void* src, size_t bytes) = 0;

  // e <- beta * e + delta.
  virtual absl::Status EfUpdate(float* e, const float* delta, size_t n, float beta) = 0;
  virtual absl::Status Zero(float* x, size_t n) = 0;
  // out[i] = bf16(e[i]); e[i] -= out[i].
  virtual absl::Status Bf16Encode(float* e, size_t n, uint16_t* out) = 0;
  // Per chunk c of `chunk` elements: meta = the decode table (kStat, kGaussian: 2^bits
  // floats at meta + c * 2^bits) or (lo, step) (kLinear: meta + 2c), codes one byte each.
  virtual absl::Status Quantize(Quantizer q, const float* x, size_t n, size_t chunk, int bits, float* meta,
                                uint8_t* codes) = 0;
  // sum[i] += factor * table_c[codes[i]], tables from Quantize's meta. factor is +-1.
  virtual absl::Status Dequantize(Quantizer q, const float* meta, const uint8_t* codes, size_t n, size_t chunk,
                                  int bits, float factor, float* sum) = 0;
  // out[i] = lut[codes[i]].
  virtual absl::Status Lookup(const float* lut, const uint8_t* codes, size_t n, float* out) = 0;
  virtual absl::Status PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* out) = 0;
  virtual absl::Status PackIndices(const uint32_t* idx, size_t n, int bits, uint8_t* out) = 0;
  // Chunked top-k (kernels/topk.h): min(k, length) ascending indices per chunk.
  virtual absl::Status TopK(const float* x, size_t n, size_t chunk, size_t k, uint32_t* idx) = 0;
  virtual absl::Status Gather(const float* x, size_t n, size_t chunk, size_t k, const uint32_t* idx, float* vals) = 0;
  // The seeded subsets of kernels/subset.h, in the idx layout of Gather and Scatter.
  virtual absl::Status Subset(uint32_t seed, size_t n, size_t chunk, size_t k, uint32_t* idx) = 0;
  // sum[chunk start + idx[t]] += factor * vals[t]. factor is +-1.
  virtual absl::Status Scatter(const float* vals, size_t n, size_t chunk, size_t k, const uint32_t* idx, float factor,
                               float* sum) = 0;
  // scales[c] = mean |x| over chunk c.
  virtual absl::Status MeanAbs(const float* x, size_t n, size_t chunk, float* scales) = 0;
  // Sign bits (kernels/sign.h), zero elements' coins TieBit(seed + i).
  virtual absl::Status SignPack(const float* x, size_t n, uint64_t seed, uint8_t* out) = 0;
  // sum[i] += factor * (bit i ? scales[i / chunk] : -scales[i / chunk]). factor is +-1.
  virtual absl::Status SignAccumulate(const uint8_t* bits, const float* scales, size_t n, size_t chunk, float factor,
                                      float* sum) = 0;
};

// The CPU backend (kernels/cpu); one instance serves every thread.
CodecBackend& CpuBackend();

// A CUDA backend on `device`, running on `stream` (a cudaStream_t, e.g. LibTorch's current
// stream, so that it follows the kernels that wrote delta and ef; nullptr: a stream of its
// own), with device scratch and a pinned host buffer for payloads; UNAVAILABLE when this
// build has no CUDA or the device is not usable. Not thread-safe: one encoder at a time.
absl::StatusOr<std::unique_ptr<CodecBackend>> MakeCudaBackend(int device, void* stream = nullptr);
// Number of usable CUDA devices (0 without CUDA).
int CudaDeviceCount();

}  // namespace muloco
