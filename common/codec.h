// Wire payloads for pseudo-gradients and global updates: a fixed 32-byte header (magic,
// format version, scheme, element count, body size, body checksum) and a scheme-specific
// body. Decoding validates everything a peer controls and never reads out of bounds.
//
// Header layout (little-endian):
//   0  char[4]  magic "MLCP"
//   4  u8       format version (1)
//   5  u8       scheme (Scheme)
//   6  u16      reserved, must be 0
//   8  u64      number of elements
//   16 u64      body bytes
//   24 u64      xxh64 of the body
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muloco {

enum class Scheme : uint8_t {
  kDenseFp32 = 1,  // raw fp32 values
};

inline constexpr size_t kPayloadHeaderBytes = 32;
inline constexpr uint8_t kPayloadVersion = 1;

struct PayloadHeader {
  Scheme scheme = Scheme::kDenseFp32;
  uint64_t num_elements = 0;
  uint64_t body_bytes = 0;
  uint64_t body_checksum = 0;
};

// "dense-fp32" -> kDenseFp32; INVALID_ARGUMENT for unknown names.
absl::StatusOr<Scheme> ParseScheme(absl::string_view name);
const char* SchemeName(Scheme scheme);

// Exact size of an encoded payload of n elements.
size_t PayloadBytes(Scheme scheme, size_t n);

// Encodes n values; the payload's size is PayloadBytes(scheme, n).
std::string Encode(Scheme scheme, const float* values, size_t n);

// Validates magic, version, scheme, sizes (against expected_elements) and checksum.
absl::StatusOr<PayloadHeader> ParseHeader(absl::string_view payload, size_t expected_elements);

// sum[i] += decoded[i] for every element, after full validation (nothing is written when
// the payload is rejected). Decoded values must be finite.
absl::Status DecodeAccumulate(absl::string_view payload, size_t n, float* sum);

}  // namespace muloco
