// Payload encoding and validated decoding (see codec.h).
#include "common/codec.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace muloco {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "payloads are little-endian");
constexpr char kMagic[4] = {'M', 'L', 'C', 'P'};
constexpr uint64_t kBodySeed = 0x626f6479ULL;

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

}  // namespace

absl::StatusOr<Scheme> ParseScheme(absl::string_view name) {
  if (name == "dense-fp32") return Scheme::kDenseFp32;
  return absl::InvalidArgumentError(absl::StrCat("unknown codec '", name, "' (known: dense-fp32)"));
}

const char* SchemeName(Scheme scheme) {
  switch (scheme) {
    case Scheme::kDenseFp32:
      return "dense-fp32";
  }
  return "unknown";
}

size_t PayloadBytes(Scheme scheme, size_t n) {
  switch (scheme) {
    case Scheme::kDenseFp32:
      return kPayloadHeaderBytes + n * sizeof(float);
  }
  return 0;
}

std::string Encode(Scheme scheme, const float* values, size_t n) {
  std::string out(PayloadBytes(scheme, n), '\0');
  char* body = out.data() + kPayloadHeaderBytes;
  const size_t body_bytes = out.size() - kPayloadHeaderBytes;
  if (n > 0) std::memcpy(body, values, body_bytes);
  char* h = out.data();
  std::memcpy(h, kMagic, 4);
  Store<uint8_t>(h + 4, kPayloadVersion);
  Store<uint8_t>(h + 5, static_cast<uint8_t>(scheme));
  Store<uint16_t>(h + 6, 0);
  Store<uint64_t>(h + 8, n);
  Store<uint64_t>(h + 16, body_bytes);
  Store<uint64_t>(h + 24, Checksum64(body, body_bytes, kBodySeed));
  return out;
}

absl::StatusOr<PayloadHeader> ParseHeader(absl::string_view payload, size_t expected_elements) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("payload: " + m); };
  if (payload.size() < kPayloadHeaderBytes) {
    return bad(absl::StrCat("truncated header (", payload.size(), " bytes)"));
  }
  const char* h = payload.data();
  if (std::memcmp(h, kMagic, 4) != 0) return bad("bad magic");
  if (Load<uint8_t>(h + 4) != kPayloadVersion) {
    return bad(absl::StrCat("unsupported format version ", Load<uint8_t>(h + 4)));
  }
  if (Load<uint16_t>(h + 6) != 0) return bad("reserved bits set");
  PayloadHeader hdr;
  const uint8_t scheme = Load<uint8_t>(h + 5);
  if (scheme != static_cast<uint8_t>(Scheme::kDenseFp32)) return bad(absl::StrCat("unknown scheme ", scheme));
  hdr.scheme = static_cast<Scheme>(scheme);
  hdr.num_elements = Load<uint64_t>(h + 8);
  hdr.body_bytes = Load<uint64_t>(h + 16);
  hdr.body_checksum = Load<uint64_t>(h + 24);
  if (hdr.num_elements != expected_elements) {
    return bad(absl::StrCat("has ", hdr.num_elements, " elements, expected ", expected_elements));
  }
  if (hdr.body_bytes != payload.size() - kPayloadHeaderBytes ||
      PayloadBytes(hdr.scheme, expected_elements) != payload.size()) {
    return bad(absl::StrCat("size ", payload.size(), " does not match ", SchemeName(hdr.scheme), " of ",
                            expected_elements, " elements"));
  }
  if (Checksum64(h + kPayloadHeaderBytes, hdr.body_bytes, kBodySeed) != hdr.body_checksum) {
    return bad("body checksum mismatch");
  }
  return hdr;
}

absl::Status DecodeAccumulate(absl::string_view payload, size_t n, float* sum) {
  absl::StatusOr<PayloadHeader> hdr = ParseHeader(payload, n);
  if (!hdr.ok()) return hdr.status();
  const char* body = payload.data() + kPayloadHeaderBytes;
  // Validate before writing so a rejected payload leaves `sum` untouched.
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(Load<float>(body + i * sizeof(float)))) {
      return absl::InvalidArgumentError(absl::StrCat("payload: non-finite value at element ", i));
    }
  }
  for (size_t i = 0; i < n; ++i) sum[i] += Load<float>(body + i * sizeof(float));
  return absl::OkStatus();
}

}  // namespace muloco
