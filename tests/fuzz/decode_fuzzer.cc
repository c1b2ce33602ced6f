// libFuzzer target for the payload decoder (codec/codec.h: DecodeAccumulate, VoteAccumulate).
//
// Input: 2 control bytes (expected element count n and optional header fix-ups, see
// fuzz_input.h), then the payload. Whatever the bytes, decoding must either
//   - succeed, leaving every element of sum finite (and the same result on a second decode), or
//   - fail with INVALID_ARGUMENT and leave sum bit-for-bit untouched,
// and never read or write out of bounds or hit undefined behaviour (ASan, UBSan). Anything
// else aborts, which libFuzzer reports as a crash with the input saved.
//
// Built and run by tests/fuzz/run_fuzz.sh.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "codec/codec.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using muloco::fuzz::kControlBytes;

// The finite starting value of every element of sum, compared bit for bit after a rejection.
constexpr float kPoison = 3.25f;

[[noreturn]] void Fail(const char* what, const absl::Status& s, size_t n, size_t bytes) {
  std::fprintf(stderr, "decode_fuzzer: %s (n=%zu, payload %zu bytes, status: %s)\n", what, n, bytes,
               s.ToString().c_str());
  std::abort();
}

// Start-up self-check: a valid payload decodes, and the harness's checksum fix-up agrees
// with the codec (else the fix-up mode would silently test nothing but "checksum mismatch").
void SelfCheck() {
  const std::vector<float> x = {1.0f, -2.0f, 0.5f};
  std::string p = muloco::Encode(muloco::DenseSegments(x.size()), x.data());
  std::vector<float> sum(x.size(), 0.0f);
  absl::Status s = muloco::DecodeAccumulate(p, x.size(), sum.data());
  if (!s.ok() || sum != x) Fail("self-check: a valid 3-element dense payload does not round-trip", s, x.size(), p.size());
  p[24] ^= 0x5a;  // break the checksum
  std::fill(sum.begin(), sum.end(), 0.0f);
  s = muloco::DecodeAccumulate(p, x.size(), sum.data());
  if (s.ok()) Fail("self-check: a payload with a broken checksum was accepted", s, x.size(), p.size());
  muloco::fuzz::ApplyFixes(muloco::fuzz::kFixAll, x.size(), p.data(), p.size());
  s = muloco::DecodeAccumulate(p, x.size(), sum.data());
  if (!s.ok() || sum != x) Fail("self-check: the harness's checksum fix-up disagrees with the codec", s, x.size(), p.size());
}

}  // namespace

void CheckVotes(absl::string_view view, size_t n, size_t bytes);

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  SelfCheck();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kControlBytes) return -1;  // not added to the corpus
  const uint16_t control = static_cast<uint16_t>(data[0] | (data[1] << 8));
  const size_t n = muloco::fuzz::ElementsOf(control);

  // Exact-size heap copies, so any read past the payload or write past sum trips ASan.
  const size_t bytes = size - kControlBytes;
  std::unique_ptr<char[]> payload(new char[bytes]);
  if (bytes) std::memcpy(payload.get(), data + kControlBytes, bytes);
  muloco::fuzz::ApplyFixes(control, n, payload.get(), bytes);
  const absl::string_view view(payload.get(), bytes);
  CheckVotes(view, n, bytes);

  std::unique_ptr<float[]> sum(new float[n]);
  for (size_t i = 0; i < n; ++i) sum[i] = kPoison;

  const absl::Status s = muloco::DecodeAccumulate(view, n, sum.get());
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kInvalidArgument) Fail("rejected with a code other than INVALID_ARGUMENT", s, n, bytes);
    if (s.message().empty()) Fail("rejected without a reason", s, n, bytes);
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(&sum[i], &kPoison, sizeof(float)) != 0) Fail("rejected payload wrote to sum", s, n, bytes);
    }
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(sum[i])) Fail("accepted payload produced a non-finite sum", s, n, bytes);
  }
  // Decoding is a pure function of the payload: a second decode adds exactly the same values.
  std::unique_ptr<float[]> again(new float[n]);
  for (size_t i = 0; i < n; ++i) again[i] = kPoison;
  const absl::Status s2 = muloco::DecodeAccumulate(view, n, again.get());
  if (!s2.ok()) Fail("second decode of an accepted payload failed", s2, n, bytes);
  if (n && std::memcmp(sum.get(), again.get(), n * sizeof(float)) != 0) Fail("two decodes differ", s2, n, bytes);
  return 0;
}

// The vote counter (SignMuon) takes the same hostile bytes: it either adds exactly +-1 per
// element or rejects with INVALID_ARGUMENT and leaves the counts untouched.
void CheckVotes(absl::string_view view, size_t n, size_t bytes) {
  constexpr int32_t kStart = 7;
  std::unique_ptr<int32_t[]> counts(new int32_t[n]);
  for (size_t i = 0; i < n; ++i) counts[i] = kStart;
  const absl::Status s = muloco::VoteAccumulate(view, n, counts.get());
  for (size_t i = 0; i < n; ++i) {
    if (s.ok() ? (counts[i] != kStart + 1 && counts[i] != kStart - 1) : counts[i] != kStart) {
      Fail(s.ok() ? "accepted vote payload did not add +-1" : "rejected vote payload wrote to counts", s, n, bytes);
    }
  }
  if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument) Fail("vote rejected with another code", s, n, bytes);
}
