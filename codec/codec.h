// Wire payloads for pseudo-gradients and global updates, with error feedback.
//
// A payload is self-describing: a 32-byte header, a table of segments (one per tensor,
// 32 bytes each, giving scheme, bits, chunk size, k, shape), the segments' data, and an
// xxh64 checksum of everything after the header. Decoding validates every field a peer
// controls (sizes, bit widths, index range and order, checksum; every value and table entry
// finite and within +-kMaxAbsValue) before it writes anything, and never reads or writes out
// of bounds.
//
// Header (little-endian):  0 "MLCP" | 4 u8 version (2) | 5 u8 0 | 6 u16 segments |
//                          8 u64 elements | 16 u64 body bytes | 24 u64 xxh64(body)
// Segment entry:           0 u8 scheme | 1 u8 bits | 2 u16 0 | 4 u32 chunk | 8 u32 k |
//                          12 u32 rows | 16 u64 numel | 24 u64 data bytes
// Segment data, with C = chunk, nc = ceil(numel / C):
//   dense-fp32  numel fp32                       dense-bf16  numel bf16 (round to nearest even)
//   quant       nc * 2^bits fp32 decode tables, then the codes packed (bits each)
//   linear      nc * 2 fp32 (min, step), then the codes packed
//   (quant, lloyd and linear with k > 0, the `keep` option: u32 seed, then the layout above
//   for the elements of a seeded subset of min(k, length) per chunk, kernels/subset.h, taken
//   chunk after chunk as chunks of k; the rest stay in the error feedback)
//   topk        per chunk the min(k, chunk length) largest |x|, indices ascending:
//               [2^bits fp32 table if bits < 32], indices packed log2(C) bits each,
//               values (bits 32: fp32; else codes of one statistical table per segment)
//   sign        nc fp32 scales (mean |x| of the chunk), then 1 bit per element (1: x > 0;
//               x == 0: a seeded coin, see Compress);
//               decodes to +-scale
// Codes of a chunk start on a byte boundary (C is a multiple of 8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codec/codec_backend.h"
#include "codec/codec_types.h"

namespace muloco {

// CodecConfig from its spec string (codec_types.h).
absl::StatusOr<CodecConfig> ParseCodec(absl::string_view spec);
std::string CodecName(const CodecConfig& config);  // canonical spec string

// One segment per tensor, following the config (1-D tensors stay dense if asked).
std::vector<Segment> PlanSegments(const std::vector<TensorShape>& tensors, const CodecConfig& config);
// A single dense fp32 segment of n elements.
std::vector<Segment> DenseSegments(uint64_t n);

uint64_t SegmentDataBytes(const Segment& s);
// Exact size of a payload for these segments.
uint64_t PayloadBytes(const std::vector<Segment>& segments);

// "Rx smaller than dense fp32, B bits/param" for `bytes` sent as `payloads` payloads of a
// model of `n` parameters, every header and table included: how sizes are printed.
std::string SizeNote(uint64_t bytes, uint64_t payloads, uint64_t n);

// Error-feedback compression, fused chunk by chunk: ef <- beta * ef + delta (skipped when
// delta is null), payload = C(ef), ef <- ef - decode(payload). Returns the payload.
// `tie_seed` decides the sign bits of exactly zero elements in sign segments (element i:
// kernels::TieBit(tie_seed + i)); workers whose votes are summed must use different seeds.
// It also seeds the subsets of `keep` segments: a new seed every round, or the same elements
// are left out every time.
// `threads` > 1 compresses ranges of segments on that many threads: the same bytes.
std::string Compress(const std::vector<Segment>& segments, const float* delta, float beta, float* ef,
                     uint64_t tie_seed = 0, int threads = 1);
// The same on a backend (codec_backend.h): delta and ef are the backend's memory (device
// memory for CUDA), the payload comes back in host memory, with the same bytes as the CPU's.
// Errors: the backend's (a failed CUDA call; UNIMPLEMENTED for a plan it cannot encode).
absl::StatusOr<std::string> Compress(CodecBackend& backend, const std::vector<Segment>& segments, const float* delta,
                                     float beta, float* ef, uint64_t tie_seed = 0, int threads = 1);

// Plain encoding of x (no feedback kept).
std::string Encode(const std::vector<Segment>& segments, const float* x);

// Validates everything (expected_elements must match), then sum[i] += decoded[i]. Nothing
// is written when the payload is rejected (INVALID_ARGUMENT with the reason).
absl::Status DecodeAccumulate(absl::string_view payload, size_t expected_elements, float* sum);

// Validates like DecodeAccumulate and returns the L2 norm of the decoded values, holding one
// segment's values at a time (memory: the largest segment, not the model).
absl::StatusOr<double> DecodedNorm(absl::string_view payload, size_t expected_elements);

struct WeightedPayload {
  absl::string_view payload;
  float scale = 1.0f;  // sum += scale * decoded (1: decoded straight into the sum)
};
// sum += Σ scale·decode(payload), over `threads` threads, each taking a contiguous range of
// segments of every payload (payloads sharing one segment table; otherwise on one thread).
// Every element receives its additions in payload order, so the result is bit-identical to
// decoding the payloads one after another, for any thread count.
// REQUIRES: every payload passed DecodeAccumulate's validation (e.g. DecodedNorm).
void SumPayloads(const std::vector<WeightedPayload>& payloads, size_t expected_elements, float* sum, int threads);

// A validated payload's segments, located once, so that any range of the model can be
// decoded on its own (the server's screening works tensor by tensor, holding one tensor of
// every update instead of whole models). Views `payload`: it must outlive this object.
class PayloadSegments {
 public:
  // Frames the payload (header, table, checksum; INVALID_ARGUMENT as DecodeAccumulate).
  // REQUIRES for DecodeRange: the payload passed DecodeAccumulate's validation (e.g.
  // DecodedNorm), which this does not repeat.
  static absl::StatusOr<PayloadSegments> Of(absl::string_view payload, size_t expected_elements);
  // out[0, count) += decoded elements [first, first + count). REQUIRES: first + count <= n.
  void DecodeRange(uint64_t first, uint64_t count, float* out) const;

 private:
  std::vector<Segment> segments_;
  std::vector<const char*> data_;
  std::vector<uint64_t> offset_;  // element offset of each segment, then the total
};

// OK when the payload is well framed and its segment table is exactly `plan` (the run's
// codec); INVALID_ARGUMENT otherwise. Checks framing only: DecodeAccumulate still validates
// the data.
absl::Status CheckPlan(absl::string_view payload, const std::vector<Segment>& plan);

// Majority-vote counting (SignMuon): every segment must be a sign segment; validates like
// DecodeAccumulate, then counts[i] += +1 (bit set) or -1. The scales are ignored.
absl::Status VoteAccumulate(absl::string_view payload, size_t expected_elements, int32_t* counts);
// The majority vote of the counts: out[i] = sign(counts[i]), 0 for a tie.
void VoteSign(const int32_t* counts, size_t n, float* out);

}  // namespace muloco
