// The codec's schemes, one table entry each (codec_schemes.cc): parameter checks, data size,
// planning from a CodecConfig, the encoder (on any CodecBackend) and the validating decoder
// (on the host). codec.cc frames payloads around these and holds no per-scheme code.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "codec/codec_backend.h"
#include "codec/codec_types.h"

namespace muloco::codec_internal {

struct SchemeOps {
  Scheme scheme;
  const char* name;
  // Parameters valid (a peer's or a config's), before any size is computed from them.
  absl::Status (*check)(const Segment& s);
  // Bytes of this segment's data. REQUIRES: check passed.
  uint64_t (*data_bytes)(const Segment& s);
  // Fills bits, chunk, k of a segment from the config (numel and rows already set).
  void (*plan)(const CodecConfig& c, Segment& s);
  // The config's keys after "name:" in its canonical spec ("" when none).
  std::string (*spec)(const CodecConfig& c);
  // e <- beta * e + delta (delta null: no update), then writes the encoding of e at offset
  // `at` of the payload `out` through b.Emit and leaves e - decode(encoding) in e; e and
  // delta are backend memory. Zero elements of sign segments take coins TieBit(tie_seed + i).
  absl::Status (*encode)(CodecBackend& b, const Segment& s, const float* delta, float beta, float* e, char* out,
                         size_t at, uint64_t tie_seed);
  // sum == nullptr: validates d (every value and table entry finite and within
  // kMaxAbsValue, indices in range and ascending). Otherwise sum[i] += decoded[i], with
  // REQUIRES: d passed validation.
  absl::Status (*decode)(const Segment& s, const char* d, float* sum);
};

// nullptr for an unknown scheme.
const SchemeOps* FindScheme(Scheme scheme);
// By spec name or alias ("fp32" for dense-fp32); nullptr when unknown.
const SchemeOps* FindScheme(const std::string& name);
// "dense-fp32, dense-bf16, ...": the names, for messages.
std::string SchemeNames();

absl::Status Bad(const std::string& message);  // INVALID_ARGUMENT "payload: ..."
// Bad("<scheme name> segment: <message>"). REQUIRES: FindScheme(s.scheme) is not null.
absl::Status BadSegment(const Segment& s, const std::string& message);

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

inline uint64_t NumChunks(const Segment& s) { return s.chunk ? (s.numel + s.chunk - 1) / s.chunk : 0; }

inline constexpr uint32_t kMaxChunk = uint32_t{1} << 24;

}  // namespace muloco::codec_internal
