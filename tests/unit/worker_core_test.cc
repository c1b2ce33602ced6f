// The worker core's pieces without a server: Uplink (staged error feedback: a refused push
// loses nothing, and decoded payloads + residual always equal the inputs) and Replica
// (applies an update only for its round and only when the checksum agrees), and the retry
// Backoff (short waits while the server is unreachable).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "worker/replica.h"
#include "worker/retry.h"
#include "worker/uplink.h"

namespace muloco {
namespace {

std::vector<float> Noise(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.01f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

const std::vector<Segment> kPlan = PlanSegments({{32, 32 * 64, false}, {1, 100, true}}, *ParseCodec("lloyd:bits=2,chunk=512"));
constexpr size_t kN = 32 * 64 + 100;

TEST(Uplink, ARefusedPushLosesNothingAndDecodedPlusResidualIsTheInput) {
  Uplink up(kPlan, /*sign_vote=*/false, /*ef_beta=*/1.0f, kN, 7);
  std::vector<double> inputs(kN, 0.0), decoded(kN, 0.0);
  for (int round = 0; round < 6; ++round) {
    std::vector<float> delta = Noise(kN, round);
    for (size_t i = 0; i < kN; ++i) inputs[i] += delta[i];
    std::vector<float> copy = delta;
    const std::string refused = *up.Encode(copy.data(), round);  // never committed
    copy = delta;
    const std::string accepted = *up.Encode(copy.data(), round);
    EXPECT_EQ(refused, accepted);  // e was untouched by the refused try
    up.Commit();
    std::vector<float> d(kN, 0.0f);
    ASSERT_TRUE(DecodeAccumulate(accepted, kN, d.data()).ok());
    for (size_t i = 0; i < kN; ++i) decoded[i] += d[i];
  }
  // Σ decoded + e = Σ inputs (β = 1), element by element, up to float rounding.
  const std::vector<float> e = up.residual();
  ASSERT_EQ(e.size(), kN);
  for (size_t i = 0; i < kN; ++i) ASSERT_NEAR(decoded[i] + e[i], inputs[i], 1e-6) << i;
  EXPECT_GT(up.ResidualNorm(), 0.0);
  up.Reset();
  EXPECT_EQ(up.ResidualNorm(), 0.0);
}

TEST(Replica, AppliesOnlyItsRoundAndOnlyWithTheServersChecksum) {
  std::vector<float> params = Noise(kN, 1);
  Replica r;
  r.Reset(FetchedModel{3, ParamChecksum(params.data(), kN), params});
  const std::vector<float> step = Noise(kN, 2);
  RoundResult u;
  u.round = 3;
  u.next_round = 4;
  u.payload = Encode(kPlan, step.data());
  std::vector<float> expected = params;
  ASSERT_TRUE(DecodeAccumulate(u.payload, kN, expected.data()).ok());
  u.checksum = ParamChecksum(expected.data(), kN);

  RoundResult wrong_round = u;
  wrong_round.round = 2;
  EXPECT_EQ(r.Apply(wrong_round).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.round(), 3u);
  EXPECT_EQ(r.params(), params);  // untouched

  RoundResult wrong_sum = u;
  wrong_sum.checksum ^= 1;
  EXPECT_EQ(r.Apply(wrong_sum).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r.round(), 3u);  // unusable until Reset, and still at its round

  r.Reset(FetchedModel{3, ParamChecksum(params.data(), kN), params});
  ASSERT_TRUE(r.Apply(u).ok());
  EXPECT_EQ(r.round(), 4u);
  EXPECT_EQ(r.checksum(), u.checksum);
  EXPECT_EQ(r.params(), expected);
}

// An unreachable server is asked again at most kUnreachableMaxS (±50%) apart however long
// it stays away; a busy one gets the whole exponential backoff (5 s ±50% after 6 doublings).
TEST(Backoff, UnreachableWaitsStayShortBusyOnesGrow) {
  Backoff b;
  for (int i = 0; i < 20; ++i) EXPECT_LE(b.Next(absl::StatusCode::kUnavailable), 1.5 * Backoff::kUnreachableMaxS);
  EXPECT_GE(b.Next(absl::StatusCode::kResourceExhausted), 2.5);
  b.Reset();
  EXPECT_LE(b.Next(absl::StatusCode::kResourceExhausted), 0.15);
}

}  // namespace
}  // namespace muloco
