// CPU kernels: bit packing, the quantizers (including the 2-bit statistical quantizer's
// error on N(0,1) against its value computed by numerical integration), top-k selection
// against brute force, sign packing and majority votes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/bitpack.h"
#include "kernels/error_feedback.h"
#include "kernels/quantize.h"
#include "kernels/sign.h"
#include "kernels/subset.h"
#include "kernels/topk.h"

namespace muloco::kernels {
namespace {

std::vector<float> Normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(BitPack, CodesAndIndicesRoundTripAtEveryWidth) {
  std::mt19937 rng(1);
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 1001u}) {
    for (int bits : {1, 2, 4, 8}) {
      std::vector<uint8_t> codes(n), back(n, 0xee);
      for (auto& c : codes) c = rng() & ((1u << bits) - 1);
      std::vector<uint8_t> packed(PackedBytes(n, bits), 0xff);
      cpu::PackCodes(codes.data(), n, bits, packed.data());
      cpu::UnpackCodes(packed.data(), n, bits, back.data());
      EXPECT_EQ(codes, back) << n << " " << bits;
      if (n * bits % 8) {
        EXPECT_EQ(packed.back() >> (n * bits % 8), 0) << "padding bits must be zero";
      }
    }
    for (int bits : {1, 5, 12, 17, 24}) {
      std::vector<uint32_t> idx(n), back(n, 0xdeadbeef);
      for (auto& i : idx) i = rng() & ((1u << bits) - 1);
      std::vector<uint8_t> packed(PackedBytes(n, bits), 0xff);
      cpu::PackIndices(idx.data(), n, bits, packed.data());
      cpu::UnpackIndices(packed.data(), n, bits, back.data());
      EXPECT_EQ(idx, back) << n << " " << bits;
    }
  }
  EXPECT_EQ(PackedBytes(4096, 12), 6144u);
}

// E[(x - centroid(bin))^2] for x ~ N(0,1) and the 2-bit statistical quantizer's bins
// (scale 1.5: boundaries -2.25, -0.75, 0.75; the top bin absorbs the clamped tail).
double TheoreticalTwoBitMse() {
  const double edges[5] = {-INFINITY, -2.25, -0.75, 0.75, INFINITY};
  auto pdf = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  double mse = 0;
  for (int b = 0; b < 4; ++b) {
    const double a = edges[b], z = edges[b + 1];
    const double p = cdf(z) - cdf(a);
    const double pa = std::isinf(a) ? 0 : pdf(a), pz = std::isinf(z) ? 0 : pdf(z);
    const double m1 = pa - pz;                                                   // ∫ x φ
    const double m2 = p + (std::isinf(a) ? 0 : a * pa) - (std::isinf(z) ? 0 : z * pz);  // ∫ x² φ
    mse += m2 - m1 * m1 / p;  // ∫ (x - c)² φ with c = m1 / p
  }
  return mse;
}

TEST(Quantize, TwoBitStatisticalErrorOnGaussianIsNearTheory) {
  const size_t n = 1 << 20;
  std::vector<float> x = Normal(n, 2);
  float lut[4];
  std::vector<uint8_t> codes(n);
  cpu::StatQuantize(x.data(), n, 2, lut, codes.data());
  double mse = 0;
  for (size_t i = 0; i < n; ++i) mse += (x[i] - lut[codes[i]]) * (x[i] - lut[codes[i]]);
  mse /= n;
  const double theory = TheoreticalTwoBitMse();
  EXPECT_NEAR(mse, theory, 0.02 * theory) << "theory " << theory;
  // The bins are asymmetric by construction (the clamped +2 bin folds into +1), so the
  // error sits above the optimal 4-level (Lloyd-Max) quantizer's 0.1175.
  EXPECT_GT(theory, 0.1175);
  EXPECT_LT(theory, 0.19);
  EXPECT_TRUE(std::is_sorted(lut, lut + 4));
}

// Lloyd–Max's MSE for N(0,1) (Max 1960): 1 bit 1 - 2/pi, 2 bits 0.1175, 4 bits 0.009497.
TEST(Quantize, GaussianBinsReachLloydMaxErrorAndAreSymmetric) {
  const size_t n = 1 << 20;
  std::vector<float> x = Normal(n, 5);
  const std::pair<int, double> expected[] = {{1, 1 - 2 / M_PI}, {2, 0.1175}, {4, 0.009497}};
  for (auto [bits, theory] : expected) {
    std::vector<float> lut(NumBins(bits));
    std::vector<uint8_t> codes(n);
    cpu::GaussianQuantize(x.data(), n, bits, lut.data(), codes.data());
    double mse = 0;
    for (size_t i = 0; i < n; ++i) mse += (x[i] - lut[codes[i]]) * (x[i] - lut[codes[i]]);
    EXPECT_NEAR(mse / n, theory, 0.02 * theory) << bits << " bits";
    EXPECT_TRUE(std::is_sorted(lut.begin(), lut.end())) << bits;
    for (int b = 0; b < NumBins(bits) / 2; ++b) {  // symmetric levels on symmetric data
      EXPECT_NEAR(lut[b], -lut[NumBins(bits) - 1 - b], 0.01) << bits << " bin " << b;
    }
    const GaussianBins g = GaussianBinsFor(bits);
    for (int b = 0; b < NumBins(bits); ++b) EXPECT_NEAR(lut[b], g.level[b], 0.01) << bits << " bin " << b;
  }
  // Constant input: one code, decoded exactly.
  std::vector<float> c(100, -2.25f);
  float lut[4];
  std::vector<uint8_t> codes(100);
  cpu::GaussianQuantize(c.data(), 100, 2, lut, codes.data());
  for (uint8_t q : codes) EXPECT_EQ(lut[q], -2.25f);
}

TEST(Quantize, ErrorShrinksWithBitsAndLinearCoversTheRange) {
  const size_t n = 1 << 16;
  std::vector<float> x = Normal(n, 3);
  double last = 1e9;
  for (int bits : {1, 2, 4, 8}) {
    std::vector<float> lut(NumBins(bits)), sum(n, 0.0f);
    std::vector<uint8_t> codes(n);
    cpu::StatQuantize(x.data(), n, bits, lut.data(), codes.data());
    cpu::DequantizeAccumulate(lut.data(), codes.data(), n, sum.data());
    double mse = 0;
    for (size_t i = 0; i < n; ++i) mse += (x[i] - sum[i]) * (x[i] - sum[i]);
    EXPECT_LT(mse / n, last) << bits;
    last = mse / n;
    float lo, step;
    cpu::LinearQuantize(x.data(), n, bits, &lo, &step, codes.data());
    std::vector<float> table(NumBins(bits));
    LinearTable(lo, step, bits, table.data());
    EXPECT_EQ(lo, *std::min_element(x.begin(), x.end()));
    for (size_t i = 0; i < n; ++i) ASSERT_LE(std::fabs(table[codes[i]] - x[i]), step / 2 * 1.0001f + 1e-6f);
  }
  EXPECT_LT(last, 1e-3);
}

TEST(Quantize, ConstantAndEmptyChunks) {
  std::vector<float> x(100, 3.5f);
  float lut[4];
  std::vector<uint8_t> codes(100);
  cpu::StatQuantize(x.data(), 100, 2, lut, codes.data());
  for (uint8_t c : codes) EXPECT_EQ(lut[c], 3.5f);
  cpu::StatQuantize(nullptr, 0, 2, lut, nullptr);
  for (float v : lut) EXPECT_EQ(v, 0.0f);
}

// Every chunk's subset: min(k, len) distinct positions below len, and for chunks of any length
// (1000, a short last chunk of 37) the positions left out are spread, not one run (they are
// one run only when the step q is 1 or len - 1: about 1 chunk in 16 at length 64).
TEST(Subset, DistinctPositionsSpreadOverEveryChunk) {
  for (size_t chunk : {64u, 1000u, 4096u}) {
    const size_t n = 3 * chunk + 37, k = chunk * 7 / 8;
    size_t spread = 0;  // full chunks, over the seeds, whose left-out positions form several runs
    for (uint32_t seed : {1u, 2u, 3u}) {
      std::vector<uint32_t> idx((n / chunk) * k + std::min(k, n % chunk));
      cpu::SubsetChunks(seed, n, chunk, k, idx.data());
      size_t t = 0;
      for (size_t off = 0; off < n; off += chunk) {
        const size_t len = std::min(chunk, n - off), m = std::min(k, len);
        std::vector<bool> kept(len, false);
        for (size_t j = 0; j < m; ++j, ++t) {
          ASSERT_LT(idx[t], len);
          ASSERT_FALSE(kept[idx[t]]) << "position " << idx[t] << " twice";
          kept[idx[t]] = true;
        }
        size_t runs = 0;  // runs of left-out positions, around the chunk
        for (size_t i = 0; i < len; ++i) runs += !kept[i] && kept[(i + len - 1) % len];
        spread += len == chunk && runs > 1;
      }
      EXPECT_EQ(t, idx.size());
    }
    EXPECT_GE(spread, 7u) << "chunk " << chunk;  // of 9
  }
}

TEST(TopK, KeepsExactlyTheKLargestMagnitudes) {
  std::mt19937 rng(4);
  for (size_t n : {1u, 7u, 64u, 4096u}) {
    std::vector<float> x = Normal(n, n);
    for (size_t i = 0; i < n; i += 5) x[i] = x[(i * 7) % n];  // plenty of ties
    for (size_t k : {size_t{1}, n / 2 + 1, n}) {
      std::vector<uint32_t> idx(k);
      cpu::TopKChunk(x.data(), n, k, idx.data());
      std::vector<uint32_t> all(n);
      std::iota(all.begin(), all.end(), 0u);
      std::stable_sort(all.begin(), all.end(), [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
      std::vector<uint32_t> want(all.begin(), all.begin() + k);
      std::sort(want.begin(), want.end());
      EXPECT_EQ(idx, want) << n << " " << k;
    }
  }
}

TEST(Sign, PackAndScaledDecode) {
  std::vector<float> x = {1.0f, -2.0f, 0.0f, -0.0f, 3.0f, -1e-30f, 5.0f, -5.0f, 0.5f};
  std::vector<uint8_t> bits(PackedBytes(x.size(), 1));
  const uint64_t seed = 77;
  cpu::SignPack(x.data(), x.size(), seed, bits.data());
  // Elements 2 and 3 are zeros: their bits are the seeded coins TieBit(seed + i).
  const uint8_t coins = static_cast<uint8_t>(TieBit(seed + 2) << 2 | TieBit(seed + 3) << 3);
  EXPECT_EQ(bits[0], 0b01010001 | coins);
  EXPECT_EQ(bits[1], 0b1);
  std::vector<float> sum(x.size(), 0.0f);
  cpu::SignAccumulate(bits.data(), x.size(), 2.0f, sum.data());
  EXPECT_EQ(sum[0], 2.0f);
  EXPECT_EQ(sum[1], -2.0f);
  EXPECT_FLOAT_EQ(cpu::MeanAbs(x.data(), x.size()), (1 + 2 + 3 + 1e-30f + 5 + 5 + 0.5f) / 9);
}

TEST(Sign, ZerosGetUnbiasedSeededCoins) {
  // A zero direction must not vote the same way on every worker (SignMuon's drift): its
  // coins are fair, the same for the same seed, and independent across seeds.
  const size_t n = 1 << 16;
  std::vector<float> zeros(n, 0.0f);
  std::vector<uint8_t> a(PackedBytes(n, 1)), a2(a.size()), b(a.size());
  cpu::SignPack(zeros.data(), n, 1, a.data());
  cpu::SignPack(zeros.data(), n, 1, a2.data());
  cpu::SignPack(zeros.data(), n, 2, b.data());
  EXPECT_EQ(a, a2);
  size_t ones = 0, agree = 0;
  for (size_t i = 0; i < n; ++i) {
    const int bit_a = (a[i / 8] >> (i % 8)) & 1, bit_b = (b[i / 8] >> (i % 8)) & 1;
    ones += bit_a;
    agree += bit_a == bit_b;
  }
  // Fair coins: within 5 standard deviations (sd = sqrt(n)/2 = 128) of n/2.
  EXPECT_NEAR(static_cast<double>(ones), n / 2.0, 5 * 128);
  EXPECT_NEAR(static_cast<double>(agree), n / 2.0, 5 * 128);
}

TEST(Sign, MajorityVoteForOddAndEvenWorkerCounts) {
  std::mt19937 rng(5);
  const size_t n = 333;
  for (int workers : {1, 2, 3, 4, 7, 8}) {
    std::vector<int32_t> counts(n, 0), brute(n, 0);
    for (int w = 0; w < workers; ++w) {
      std::vector<float> x = Normal(n, rng());
      std::vector<uint8_t> bits(PackedBytes(n, 1));
      cpu::SignPack(x.data(), n, w, bits.data());
      cpu::VoteAccumulate(bits.data(), n, counts.data());
      for (size_t i = 0; i < n; ++i) brute[i] += x[i] > 0 ? 1 : -1;  // Normal() draws no exact zeros
    }
    EXPECT_EQ(counts, brute);
    std::vector<float> vote(n);
    cpu::VoteSign(counts.data(), n, vote.data());
    size_t ties = 0;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(vote[i], brute[i] > 0 ? 1.0f : (brute[i] < 0 ? -1.0f : 0.0f));
      ties += brute[i] == 0;
    }
    if (workers % 2) EXPECT_EQ(ties, 0u);
    else EXPECT_GT(ties, 0u);  // even counts do tie, and ties vote 0
  }
}

TEST(ErrorFeedback, UpdateIsBetaEPlusDelta) {
  std::vector<float> e = {1, 2, 3}, d = {0.5f, -1, 0};
  cpu::EfUpdate(e.data(), d.data(), 3, 0.5f);
  EXPECT_EQ(e, (std::vector<float>{1.0f, 0.0f, 1.5f}));
  cpu::EfUpdate(e.data(), d.data(), 3, 1.0f);
  EXPECT_EQ(e, (std::vector<float>{1.5f, -1.0f, 1.5f}));
}

}  // namespace
}  // namespace muloco::kernels
