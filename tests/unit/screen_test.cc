// RobustAggregator: per-tensor norm bounds (this round's median, the history, the pair
// rule, bounded growth), the direction and size checks, sessions merged into one vote,
// the trimmed mean, what each participant is told, and ParseRobust. Checked against
// independent computations of the same formulas in plain loops.
#include "server/screen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codec/codec.h"

namespace muloco {
namespace {

std::string Dense(const std::vector<float>& v) { return Encode(DenseSegments(v.size()), v.data()); }

double Norm(const std::vector<float>& v, size_t from = 0, size_t to = SIZE_MAX) {
  double s = 0;
  for (size_t i = from; i < std::min(to, v.size()); ++i) s += double{v[i]} * v[i];
  return std::sqrt(s);
}

// Holds the payload bytes the contributions view.
struct Round {
  std::vector<std::string> bytes;
  std::vector<Contribution> in;
  void Add(const std::string& name, std::vector<std::vector<float>> sessions, bool proven = true, float weight = 1) {
    bytes.reserve(64);  // views stay valid: no reallocation in these tests
    Contribution c;
    c.name = name;
    c.weight = weight;
    c.proven = proven;
    for (const auto& s : sessions) {
      bytes.push_back(Dense(s));
      c.payloads.push_back(bytes.back());
    }
    in.push_back(std::move(c));
  }
};

// Honest updates: a common direction plus noise, as workers' pseudo-gradients are.
std::vector<std::vector<float>> Honest(size_t k, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> common(n);
  for (float& v : common) v = g(rng);
  std::vector<std::vector<float>> out(k, std::vector<float>(n));
  for (auto& d : out)
    for (size_t i = 0; i < n; ++i) d[i] = 1e-2f * (common[i] + 0.8f * g(rng));
  return out;
}

std::vector<float> PlainMean(const std::vector<std::vector<float>>& v) {
  std::vector<float> m(v[0].size(), 0.0f);
  for (const auto& d : v)
    for (size_t i = 0; i < m.size(); ++i) m[i] += d[i];
  for (float& x : m) x *= 1.0f / static_cast<float>(v.size());
  return m;
}

// Clean updates keep their full weight but for the staleness check's trim (those leaning on
// last round's aggregate more than the median one weigh (1 - c^2) / (1 - t^2): with cosines
// near 0.8 a few percent, bounded here by 0.9); a tensor above its median is clipped to it
// (which is what stops an update in the honest direction from enlarging the step), so the
// aggregate is the plain mean's direction with nearly its norm.
TEST(RobustAggregator, CleanUpdatesKeepTheirWeightAndThePlainMeansDirection) {
  const size_t n = 96;
  RobustAggregator agg(ScreenOptions{}, ChunksOf({32, 32, 32}), n, 2);
  for (uint32_t round = 0; round < 5; ++round) {
    const auto honest = Honest(4, n, 100 + round);
    Round r;
    for (size_t i = 0; i < honest.size(); ++i) r.Add("h" + std::to_string(i), {honest[i]}, round > 0);
    std::vector<float> out(n);
    const std::vector<Verdict> v = agg.Aggregate(r.in, out.data());
    for (const Verdict& x : v) {
      if (x.weight < 1) {
        EXPECT_STREQ(x.reason, "stale") << round;
      }
      EXPECT_GT(x.weight, 0.9) << round << " " << x.reason << " cos " << x.cosine;
      EXPECT_GT(x.cosine, 0.5);
    }
    const std::vector<float> want = PlainMean(honest);
    double dot = 0;
    for (size_t i = 0; i < n; ++i) dot += double{out[i]} * want[i];
    EXPECT_GT(dot / (Norm(out) * Norm(want)), 0.999) << round;
    EXPECT_GT(Norm(out) / Norm(want), 0.9) << round;
  }
}

// Two participants (no median): nothing is clipped in a clean run, and the aggregate is the
// plain mean bit for bit.
TEST(RobustAggregator, ACleanPairGivesThePlainMeanBitForBit) {
  const size_t n = 96;
  RobustAggregator agg(ScreenOptions{}, ChunksOf({32, 32, 32}), n, 2);
  for (uint32_t round = 0; round < 5; ++round) {
    const auto honest = Honest(2, n, 200);  // the same direction every round, as training has
    Round r;
    for (size_t i = 0; i < honest.size(); ++i) r.Add("h" + std::to_string(i), {honest[i]}, round > 0);
    std::vector<float> out(n);
    const std::vector<Verdict> v = agg.Aggregate(r.in, out.data());
    for (const Verdict& x : v) EXPECT_EQ(x.weight, 1.0) << round << " " << x.reason;
    const std::vector<float> want = PlainMean(honest);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], want[i]) << round << " " << i;
  }
}

TEST(RobustAggregator, OffSumsEverythingByWeight) {
  RobustAggregator agg(ScreenOptions{Robust::kOff}, ChunksOf({2}), 2, 1);
  Round r;
  r.Add("a", {{1, 0}}, true, 1);
  r.Add("b", {{0, 0}}, true, 1);     // zeros count when screening is off
  r.Add("c", {{1000, -8}}, true, 2);  // and nothing is clipped
  std::vector<float> out(2);
  const auto v = agg.Aggregate(r.in, out.data());
  EXPECT_FLOAT_EQ(out[0], (1 + 2000) / 4.0f);
  EXPECT_FLOAT_EQ(out[1], -16 / 4.0f);
  EXPECT_EQ(v[2].weight, 2.0);
}

// All of an attacker's budget on one small tensor: that tensor is clipped to chunk_factor x
// its own median norm, however small a share of the whole update it is.
TEST(RobustAggregator, ATensorIsBoundedByItsOwnHonestScale) {
  const size_t n = 68;  // a 64-element matrix and a 4-element gain
  auto honest = Honest(3, n, 1);
  std::vector<float> evil = honest[0];
  for (size_t i = 64; i < 68; ++i) evil[i] = 5.0f;  // the gain: 100x its honest size
  Round r;
  for (size_t i = 0; i < 3; ++i) r.Add("h", {honest[i]});
  r.Add("evil", {evil});
  RobustAggregator agg(ScreenOptions{}, ChunksOf({64, 4}), n, 1);
  std::vector<float> out(n);
  const auto v = agg.Aggregate(r.in, out.data());
  std::vector<double> gains;  // each participant's gain norm
  for (size_t i = 0; i < 4; ++i) gains.push_back(Norm(i < 3 ? honest[i] : evil, 64));
  std::vector<double> sorted = gains;
  std::sort(sorted.begin(), sorted.end());
  const double bound = 0.5 * (sorted[1] + sorted[2]);  // the median of four norms (chunk_factor 1)
  ASSERT_EQ(v[3].landed.size(), 2u);
  EXPECT_NEAR(v[3].landed[1], v[3].weight * bound / gains[3], 1e-6);
  EXPECT_LT(v[3].landed[1], 0.05);
  // What the gain moved: at most a quarter of the bound beyond the honest mean's.
  std::vector<float> gain_out(out.begin() + 64, out.end());
  EXPECT_LT(Norm(gain_out), Norm(PlainMean({honest[0], honest[1], honest[2]}), 64) + bound / 4 + 1e-6);
}

// An update against the robust reference (the coordinate-wise median) is left out whole; one
// that carries little of it (noise) is weighed by its agreement; a tiny one by its size.
TEST(RobustAggregator, DirectionAndSizeChecksWeighUpdates) {
  const size_t n = 256;
  auto honest = Honest(3, n, 2);
  const std::vector<float> mean = PlainMean(honest);
  std::vector<float> opposed(n), tiny(n), noise(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    opposed[i] = -1.4f * mean[i];
    tiny[i] = 0.1f * honest[0][i];
    noise[i] = 1e-2f * g(rng);
  }
  for (const auto& [name, attack, reason] :
       {std::tuple{"opposed", opposed, "opposed"}, std::tuple{"tiny", tiny, "small"},
        std::tuple{"noise", noise, "weak"}}) {
    Round r;
    for (size_t i = 0; i < 3; ++i) r.Add("h", {honest[i]});
    r.Add(name, {attack});
    RobustAggregator agg(ScreenOptions{}, ChunksOf({n}), n, 1);
    std::vector<float> out(n);
    const auto v = agg.Aggregate(r.in, out.data());
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(v[i].weight, 1.0) << name;
    EXPECT_STREQ(v[3].reason, reason) << name;
    EXPECT_LT(v[3].weight, std::string(name) == "opposed" ? 1e-12 : 0.5) << name << " cos " << v[3].cosine;
    // The aggregate is the weighted mean: its cosine to the honest mean stays high.
    double dot = 0;
    for (size_t i = 0; i < n; ++i) dot += double{out[i]} * mean[i];
    EXPECT_GT(dot / (Norm(out) * Norm(mean)), 0.95) << name;
  }
}

// A push of fewer inner steps (steps_share) is expected to be that much smaller: one of 2 of
// 10 steps at 0.15 x an honest norm keeps its weight, while the same push claiming all 10
// steps is cut by its size: weight 0.15 / tiny (0.5) = 0.3.
TEST(RobustAggregator, TheSizeCheckExpectsAShortPushToBeSmaller) {
  const size_t n = 256;
  auto honest = Honest(4, n, 5);
  std::vector<float> short_push(n);
  for (size_t i = 0; i < n; ++i) short_push[i] = 0.15f * honest[3][i];
  for (const double share : {0.2, 1.0}) {
    Round r;
    for (size_t i = 0; i < 3; ++i) r.Add("h", {honest[i]});
    r.Add("short", {short_push});
    r.in[3].steps_share = share;
    RobustAggregator agg(ScreenOptions{}, ChunksOf({n}), n, 1);
    std::vector<float> out(n);
    const auto v = agg.Aggregate(r.in, out.data());
    if (share < 1) {
      EXPECT_EQ(v[3].weight, 1.0) << v[3].reason;
    } else {
      EXPECT_STREQ(v[3].reason, "small");
      std::vector<double> norms{v[0].norm, v[1].norm, v[2].norm, v[3].norm};
      std::sort(norms.begin(), norms.end());
      const double typical = 0.5 * (norms[1] + norms[2]);  // the median of four
      EXPECT_NEAR(v[3].weight, v[3].norm / (0.5 * typical), 1e-9);
      EXPECT_LT(v[3].weight, 0.5);
    }
  }
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += double{a[i]} * b[i];
  return dot / (Norm(a) * Norm(b));
}

// A replay of the last step (x1000 its last aggregate, the norm bound clips it to the median)
// agrees with this round's median as an honest update does, but leans on last round's
// aggregate more than any honest one: it weighs (1 - c^2) / (1 - t^2), t the median of the
// honest cosines to that aggregate, and the aggregate stays the honest mean's direction.
TEST(RobustAggregator, AReplayOfTheLastStepWeighsByItsFreshPart) {
  const size_t n = 256;
  const auto honest = Honest(6, n, 4);  // one common direction: rounds 0 and 1 share it
  RobustAggregator agg(ScreenOptions{}, ChunksOf({n}), n, 1);
  std::vector<float> last(n), out(n);
  Round first;
  for (size_t i = 0; i < 3; ++i) first.Add("h", {honest[i]});
  agg.Aggregate(first.in, last.data());
  std::vector<float> replay(n);
  for (size_t i = 0; i < n; ++i) replay[i] = 1000 * last[i];
  Round second;
  for (size_t i = 3; i < 6; ++i) second.Add("h", {honest[i]});
  second.Add("replay", {replay});
  const auto v = agg.Aggregate(second.in, out.data());
  std::vector<double> honest_cos;
  for (size_t i = 3; i < 6; ++i) honest_cos.push_back(Cosine(honest[i], last));
  std::sort(honest_cos.begin(), honest_cos.end());
  const double t = honest_cos[1], c = Cosine(replay, last);  // the replay is the highest: t is the honest median
  EXPECT_GT(c, 0.999);
  EXPECT_STREQ(v[3].reason, "stale");
  EXPECT_NEAR(v[3].weight, (1 - c * c) / (1 - t * t), 1e-4);
  EXPECT_LT(v[3].weight, 0.01);
  EXPECT_NEAR(v[3].last_cosine, c, 1e-6);
  EXPECT_GT(v[3].cosine, 0.5);  // the direction check alone would have let it in
  for (size_t i = 0; i < 3; ++i) EXPECT_GT(v[i].weight, 0.9) << i;
  EXPECT_GT(Cosine(out, PlainMean({honest[3], honest[4], honest[5]})), 0.999);
}

TEST(RobustAggregator, SessionsOfOneParticipantAreAveraged) {
  RobustAggregator agg(ScreenOptions{Robust::kOff}, ChunksOf({2}), 2, 1);
  Round r;
  r.Add("a", {{1, 1}});
  r.Add("sybil", {{3, 0}, {5, 0}, {7, 0}});  // one vote: their mean (5, 0)
  std::vector<float> out(2);
  agg.Aggregate(r.in, out.data());
  EXPECT_FLOAT_EQ(out[0], 3.0f);
  EXPECT_FLOAT_EQ(out[1], 0.5f);
}

// With fewer than min_samples proven participants, the bound comes from the history; with
// no history either (a first round), from the smallest norm (pair rule).
TEST(RobustAggregator, FewParticipantsFallBackToHistoryThenThePairRule) {
  RobustAggregator agg(ScreenOptions{}, ChunksOf({2}), 2, 1);
  std::vector<float> out(2);
  Round first;  // round 0: a pair, no history
  first.Add("a", {{1, 0}}, false);
  first.Add("evil", {{100, 0}}, false);
  auto v = agg.Aggregate(first.in, out.data());
  EXPECT_FLOAT_EQ(out[0], (1 + 4) / 2.0f);  // clipped to 4 x the smallest
  EXPECT_EQ(v[1].clipped, 1u);
  Round second;  // history: the lower median of the accepted norms 1 and 4 (evil's cannot
                 // raise it), which may double in a round
  second.Add("a", {{1, 0.1f}});
  second.Add("evil", {{100, 0}});
  v = agg.Aggregate(second.in, out.data());
  EXPECT_NEAR(v[1].norm, 2 * 1.0, 1e-5);
}

// Rounds of two agree with last round's aggregate alone only weakly; with `trend` the
// direction check compares them with a decaying sum of the past aggregates instead. Round 2's
// honest update points a little against round 1's aggregate (0.2, 1) but along its sum with
// round 0's (1, 0): left out without the trend, kept with it; an update against that sum is
// left out either way.
TEST(RobustAggregator, TheTrendKeepsAnUpdateThatOnlyTheLastRoundOpposes) {
  for (double trend : {0.0, 0.5}) {
    ScreenOptions o;
    o.trend = trend;
    RobustAggregator agg(o, ChunksOf({2}), 2, 1);
    std::vector<float> out(2);
    for (const std::vector<float>& u : {std::vector<float>{1, 0}, std::vector<float>{0.2f, 1}}) {
      Round r;
      r.Add("a", {u});
      r.Add("b", {u});
      agg.Aggregate(r.in, out.data());
    }
    Round r;
    r.Add("honest", {{1, -0.3f}});
    r.Add("evil", {{-1, -0.5f}});
    const std::vector<Verdict> v = agg.Aggregate(r.in, out.data());
    EXPECT_STREQ(v[1].reason, "opposed") << trend;
    if (trend == 0) {
      EXPECT_STREQ(v[0].reason, "opposed");
      EXPECT_EQ(out[0], 0.0f);
    } else {
      EXPECT_GT(v[0].weight, 0.0);
      EXPECT_NEAR(v[0].cosine, (0.7 - 0.3) / (std::hypot(1.0, 0.3) * std::hypot(0.7, 1.0)), 1e-4);
      EXPECT_FLOAT_EQ(out[1], -0.3f);  // the honest update alone
    }
  }
}

// Colluders that proved themselves and then push x1e5 as a majority cannot ratchet a
// tensor's scale: it grows at most `growth` (2) x per round.
TEST(RobustAggregator, AMajorityCannotRatchetTheScale) {
  RobustAggregator agg(ScreenOptions{}, ChunksOf({4}), 4, 1);
  std::vector<float> out(4);
  for (int round = 0; round < 6; ++round) {
    const bool attack = round >= 2;  // rounds 0-1: everyone honest, scale 1
    Round r;
    r.Add("h1", {{1, 0, 0, 0}}, round > 0);
    r.Add("h2", {{1, 0.1f, 0, 0}}, round > 0);
    for (int k = 0; k < 3; ++k) r.Add("c" + std::to_string(k), {{attack ? 1e5f : 1.0f, 0, 0, 0}}, round > 0);
    const auto v = agg.Aggregate(r.in, out.data());
    if (attack) {
      EXPECT_NEAR(v[2].norm, std::pow(2.0, round - 1), 1e-3) << round;  // 2, 4, 8, 16
    }
  }
}

TEST(RobustAggregator, TrimmedMeanDropsTheExtremesOfEachCoordinate) {
  ScreenOptions o;
  o.mode = Robust::kTrimmed;
  o.trim = 0.2;
  RobustAggregator agg(o, ChunksOf({3}), 3, 1);
  Round r;
  const std::vector<std::vector<float>> d = {{1, 2, 3}, {2, 3, 1}, {3, 1, 2}, {2, 2, 2}, {2.5f, 1.5f, 2}};
  for (const auto& x : d) r.Add("w", {x});
  std::vector<float> out(3);
  agg.Aggregate(r.in, out.data());
  for (size_t j = 0; j < 3; ++j) {
    std::vector<float> col;
    for (const auto& x : d) col.push_back(x[j]);
    std::sort(col.begin(), col.end());
    EXPECT_FLOAT_EQ(out[j], (col[1] + col[2] + col[3]) / 3) << j;  // one dropped at each end
  }
}

TEST(RobustAggregator, NothingToAggregateGivesZero) {
  RobustAggregator agg(ScreenOptions{}, ChunksOf({3}), 3, 1);
  std::vector<float> out(3, 7.0f);
  EXPECT_TRUE(agg.Aggregate({}, out.data()).empty());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  Round zeros;
  zeros.Add("z", {{0, 0, 0}});
  const auto v = agg.Aggregate(zeros.in, out.data());
  EXPECT_EQ(v[0].weight, 0.0);
  EXPECT_STREQ(v[0].reason, "empty");
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

TEST(ParseRobust, KnownModes) {
  Robust r;
  ASSERT_TRUE(ParseRobust("off", &r));
  EXPECT_EQ(r, Robust::kOff);
  ASSERT_TRUE(ParseRobust("clip", &r));
  EXPECT_EQ(r, Robust::kClip);
  ASSERT_TRUE(ParseRobust("reject", &r));
  EXPECT_EQ(r, Robust::kReject);
  ASSERT_TRUE(ParseRobust("trimmed", &r));
  EXPECT_EQ(r, Robust::kTrimmed);
  EXPECT_FALSE(ParseRobust("median", &r));
  EXPECT_FALSE(ParseRobust("", &r));
}

}  // namespace
}  // namespace muloco
