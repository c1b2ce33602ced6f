// The codec's vocabulary: schemes, the payload format's constants, a run's codec choice
// (CodecConfig) and one tensor's encoding (Segment). The format itself is in codec.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muloco {

enum class Scheme : uint8_t {
  kDenseFp32 = 1,
  kDenseBf16 = 2,
  kQuant = 3,   // statistical quantizer (MuLoCo / SparseLoCo)
  kLinear = 4,  // min/max quantizer
  kTopK = 5,    // chunked top-k with quantized (or fp32) values
  kSign = 6,    // 1 bit per element, scaled
  kLloyd = 7,   // Lloyd–Max bins for Gaussian data, centroid table (same layout as kQuant)
};

inline constexpr size_t kPayloadHeaderBytes = 32;
inline constexpr size_t kSegmentEntryBytes = 32;
inline constexpr uint8_t kPayloadVersion = 2;
// Largest magnitude a decoded value or table entry may have. Pseudo-gradients and global
// updates are differences of parameters (|x| << 1 in practice), so anything larger is a
// corrupt or hostile payload; the bound also keeps a float sum of up to 1e30 payloads
// finite (FLT_MAX ~ 3.4e38).
inline constexpr float kMaxAbsValue = 1e6f;

// A run's choice of compression, parsed from "scheme[:key=value,...]", e.g. "dense-fp32",
// "quant:bits=2", "lloyd:bits=2,chunk=512", "lloyd:bits=1,chunk=4096,keep=0.9", "topk:chunk=4096,k=32,bits=2",
// "topk:ratio=0.01", "sign". Keys: bits, chunk, k, ratio (top-k per tensor instead of per
// chunk), keep (codes for a seeded share of each chunk), vectors
// (vectors=dense keeps 1-D tensors such as gains and biases dense fp32; vectors=same
// compresses them too).
struct CodecConfig {
  Scheme scheme = Scheme::kDenseFp32;
  int bits = 2;            // quant/linear code bits (1, 2, 4, 8); topk value bits (also 32)
  uint32_t chunk = 4096;   // elements per chunk; a multiple of 8 (topk: a power of two)
  uint32_t k = 32;         // topk: entries kept per chunk
  double keep = 0;         // quant/lloyd/linear: codes for a seeded subset of this share of each
                           // chunk (k = floor(keep * chunk) rounded down to a multiple of 8, at
                           // least 8; k >= chunk means every element); 0: all
  double ratio = 0;        // topk per tensor: keep max(1, floor(numel * ratio)) of each tensor
                           // (one chunk spanning the tensor, up to 2^24 elements); 0: chunked
  bool dense_vectors = true;
};

// One tensor's encoding.
struct Segment {
  Scheme scheme = Scheme::kDenseFp32;
  int bits = 32;
  uint32_t chunk = 0;
  uint32_t k = 0;
  uint32_t rows = 1;
  uint64_t numel = 0;
};

struct TensorShape {
  uint32_t rows = 1;  // first dimension (1 for vectors)
  uint64_t numel = 0;
  bool vector = false;
};

}  // namespace muloco
