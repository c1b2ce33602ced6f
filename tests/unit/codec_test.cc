// Dense payload codec: exact sizes, round trips at edge sizes, and hostile input.
#include "common/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace muloco {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(Codec, DenseRoundTripAndExactSize) {
  for (size_t n : {0u, 1u, 4095u, 4096u, 4097u, 1000003u}) {
    std::vector<float> x = Random(n, n);
    std::string p = Encode(Scheme::kDenseFp32, x.data(), n);
    EXPECT_EQ(p.size(), 32 + 4 * n);
    EXPECT_EQ(p.size(), PayloadBytes(Scheme::kDenseFp32, n));
    std::vector<float> sum(n, 0.5f);
    ASSERT_TRUE(DecodeAccumulate(p, n, sum.data()).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], 0.5f + x[i]);
  }
}

TEST(Codec, SchemeNames) {
  EXPECT_EQ(*ParseScheme("dense-fp32"), Scheme::kDenseFp32);
  EXPECT_EQ(ParseScheme("zip").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Codec, HostilePayloadsAreRejectedWithoutWrites) {
  const size_t n = 64;
  std::vector<float> x = Random(n, 7);
  const std::string good = Encode(Scheme::kDenseFp32, x.data(), n);
  std::vector<std::string> bad;
  for (size_t len = 0; len < good.size(); len += 7) bad.push_back(good.substr(0, len));  // truncations
  bad.push_back(good + "x");                                                              // trailing byte
  std::string p = good; p[0] = 'X'; bad.push_back(p);                                     // magic
  p = good; p[4] = 2; bad.push_back(p);                                                   // version
  p = good; p[5] = 99; bad.push_back(p);                                                  // scheme
  p = good; p[6] = 1; bad.push_back(p);                                                   // reserved
  p = good; uint64_t huge = ~0ull; std::memcpy(&p[8], &huge, 8); bad.push_back(p);        // element count
  p = good; std::memcpy(&p[16], &huge, 8); bad.push_back(p);                              // body size
  p = good; p[40] ^= 0x10; bad.push_back(p);                                              // checksum
  std::vector<float> nan = x; nan[3] = NAN;
  bad.push_back(Encode(Scheme::kDenseFp32, nan.data(), n));
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    std::string r(rng() % 400, '\0');
    for (char& c : r) c = static_cast<char>(rng());
    bad.push_back(r);
  }
  for (const std::string& b : bad) {
    std::vector<float> sum(n, 1.0f);
    EXPECT_EQ(DecodeAccumulate(b, n, sum.data()).code(), absl::StatusCode::kInvalidArgument);
    for (float v : sum) ASSERT_EQ(v, 1.0f);
  }
  // Right payload, wrong model size.
  std::vector<float> sum(n + 1, 0.0f);
  EXPECT_EQ(DecodeAccumulate(good, n + 1, sum.data()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace muloco
