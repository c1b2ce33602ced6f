// NormScreen: the robust threshold (median + MAD, median factor), its sample minimum, the
// history of accepted norms, and ParseRobust.
#include "server/screen.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace muloco {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSigma = 1.4826;  // MAD -> Gaussian standard deviation

ScreenOptions Opts(Robust mode = Robust::kClip, double mad_factor = 3.0, double median_factor = 1.5,
                   size_t min_samples = 3, size_t history_rounds = 4) {
  ScreenOptions o;
  o.mode = mode;
  o.mad_factor = mad_factor;
  o.median_factor = median_factor;
  o.min_samples = min_samples;
  o.history_rounds = history_rounds;
  return o;
}

TEST(NormScreen, DefaultsAreDocumented) {
  ScreenOptions o;
  EXPECT_EQ(o.mode, Robust::kClip);
  EXPECT_DOUBLE_EQ(o.mad_factor, 3.0);
  EXPECT_DOUBLE_EQ(o.median_factor, 1.5);
  EXPECT_EQ(o.min_samples, 3u);
  EXPECT_EQ(o.history_rounds, 4u);
}

TEST(NormScreen, OffIsInfinite) {
  NormScreen s(Opts(Robust::kOff));
  EXPECT_EQ(s.mode(), Robust::kOff);
  EXPECT_EQ(s.Threshold({1, 2, 3, 4, 100}), kInf);
  s.Remember({1, 1, 1, 1});
  EXPECT_EQ(s.Threshold({1, 2, 3, 4, 100}), kInf);
  EXPECT_EQ(s.Threshold({}), kInf);
}

TEST(NormScreen, TooFewSamplesJudgesByTheSmallest) {
  NormScreen s(Opts(Robust::kClip, 3.0, 1.5, /*min_samples=*/3));
  EXPECT_EQ(s.Threshold({}), kInf);
  EXPECT_EQ(s.Threshold({5}), kInf);  // one norm alone cannot be judged
  // A lone attacker beside one honest worker (a run's first round) is held to 4x the smaller.
  EXPECT_DOUBLE_EQ(s.Threshold({5, 500}), 20.0);
  EXPECT_DOUBLE_EQ(s.Threshold({500, 5}), 20.0);
  EXPECT_TRUE(std::isfinite(s.Threshold({5, 5, 500})));

  // min_samples 0 or 1: one sample is enough, none is not.
  for (size_t min : {size_t{0}, size_t{1}}) {
    NormScreen one(Opts(Robust::kClip, 3.0, 1.5, min));
    EXPECT_EQ(one.Threshold({}), kInf) << min;
    // median 4, MAD 0: max(4, 1.5 * 4) = 6.
    EXPECT_DOUBLE_EQ(one.Threshold({4}), 6.0) << min;
  }

  NormScreen five(Opts(Robust::kReject, 3.0, 1.5, /*min_samples=*/5));
  EXPECT_EQ(five.mode(), Robust::kReject);
  EXPECT_DOUBLE_EQ(five.Threshold({1, 2, 3, 4}), 4.0);  // below min_samples: 4 x the smallest
  EXPECT_TRUE(std::isfinite(five.Threshold({1, 2, 3, 4, 5})));
}

TEST(NormScreen, OddCountMadDominates) {
  NormScreen s(Opts());
  // Sorted 1 2 3 4 100: median 3; |x - 3| = 2 1 0 1 97 -> sorted 0 1 1 2 97: MAD 1.
  // max(3 + 3 * 1.4826 * 1, 1.5 * 3) = max(7.4478, 4.5).
  const double want = 3 + 3 * kSigma * 1;
  EXPECT_DOUBLE_EQ(s.Threshold({100, 3, 1, 4, 2}), want);
  EXPECT_NEAR(s.Threshold({1, 2, 3, 4, 100}), 7.4478, 1e-12);
  // Order does not matter.
  EXPECT_DOUBLE_EQ(s.Threshold({4, 100, 2, 1, 3}), want);
}

TEST(NormScreen, EvenCountAveragesMiddlePair) {
  NormScreen s(Opts());
  // Sorted 1 2 4 10: median (2 + 4) / 2 = 3; |x - 3| = 2 1 1 7 -> sorted 1 1 2 7: MAD 1.5.
  // max(3 + 3 * 1.4826 * 1.5, 4.5) = 9.6717.
  EXPECT_NEAR(s.Threshold({10, 4, 1, 2}), 3 + 3 * kSigma * 1.5, 1e-12);
  EXPECT_NEAR(s.Threshold({10, 4, 1, 2}), 9.6717, 1e-12);
  // Sorted 1 2 3 5 7 8: median 4; |x - 4| = 3 2 1 1 3 4 -> 1 1 2 3 3 4: MAD 2.5.
  // max(4 + 3 * 1.4826 * 2.5, 6) = 15.1195.
  EXPECT_NEAR(s.Threshold({5, 1, 3, 8, 2, 7}), 4 + 3 * kSigma * 2.5, 1e-12);
  EXPECT_NEAR(s.Threshold({8, 7, 5, 3, 2, 1}), 15.1195, 1e-12);
  // Two samples (min_samples 2): median of 2 and 6 is 4, MAD 2: 4 + 3 * 1.4826 * 2.
  NormScreen two(Opts(Robust::kClip, 3.0, 1.5, 2));
  EXPECT_NEAR(two.Threshold({6, 2}), 4 + 3 * kSigma * 2, 1e-12);
}

TEST(NormScreen, MedianFactorDominates) {
  NormScreen s(Opts());
  // 9 10 11: median 10, MAD 1: max(10 + 4.4478, 15) = 15.
  EXPECT_DOUBLE_EQ(s.Threshold({11, 9, 10}), 15.0);
  // All equal: MAD 0: max(10, 15) = 15.
  EXPECT_DOUBLE_EQ(s.Threshold({10, 10, 10, 10}), 15.0);
  // Even count: sorted 8 9 11 12: median 10; |x - 10| = 2 1 1 2: MAD 1.5:
  // max(10 + 6.6717, 15) = 16.6717; with median_factor 2: max(16.6717, 20) = 20.
  EXPECT_NEAR(s.Threshold({12, 8, 11, 9}), 10 + 3 * kSigma * 1.5, 1e-12);
  NormScreen wide(Opts(Robust::kClip, 3.0, 2.0));
  EXPECT_DOUBLE_EQ(wide.Threshold({12, 8, 11, 9}), 20.0);
  // mad_factor 0 leaves only the median terms: max(10, 1.5 * 10).
  NormScreen nomad(Opts(Robust::kClip, 0.0, 1.5));
  EXPECT_DOUBLE_EQ(nomad.Threshold({1, 10, 100}), 15.0);
  // median_factor 1 and MAD 0: the threshold is the median itself.
  NormScreen tight(Opts(Robust::kClip, 3.0, 1.0));
  EXPECT_DOUBLE_EQ(tight.Threshold({7, 7, 7}), 7.0);
}

TEST(NormScreen, OneOutlierCannotRaiseTheThresholdMuch) {
  NormScreen s(Opts());
  // Sorted 1 1 1 1 1e9: median 1, MAD 0 -> max(1, 1.5) = 1.5, however large the outlier.
  EXPECT_DOUBLE_EQ(s.Threshold({1, 1, 1e9, 1, 1}), 1.5);
  EXPECT_DOUBLE_EQ(s.Threshold({1, 1, 1e300, 1, 1}), 1.5);
}

TEST(NormScreen, HistoryJoinsTheRoundsNorms) {
  NormScreen s(Opts());  // min_samples 3
  EXPECT_EQ(s.Threshold({2}), kInf);
  s.Remember({1});
  EXPECT_DOUBLE_EQ(s.Threshold({2}), 4.0);  // 2 samples: 4 x the smallest
  s.Remember({3});
  // Samples 2 | 1 | 3: median 2, MAD 1: max(2 + 4.4478, 3).
  EXPECT_NEAR(s.Threshold({2}), 2 + 3 * kSigma, 1e-12);
  // An empty round still has the history.
  s.Remember({2});
  // Samples 1 3 2: the same.
  EXPECT_NEAR(s.Threshold({}), 2 + 3 * kSigma, 1e-12);
  // History shifts the median: samples 100 100 100 | 1 | 3 | 2 -> sorted 1 2 3 100 100 100:
  // median (3 + 100) / 2 = 51.5; |x - 51.5| = 50.5 49.5 48.5 48.5 48.5 48.5 -> MAD 48.5.
  EXPECT_NEAR(s.Threshold({100, 100, 100}), 51.5 + 3 * kSigma * 48.5, 1e-9);
  // Empty rounds are remembered as rounds too (they take a history slot).
  NormScreen e(Opts(Robust::kClip, 3.0, 1.5, 1, /*history_rounds=*/1));
  e.Remember({4});
  EXPECT_DOUBLE_EQ(e.Threshold({}), 6.0);
  e.Remember({});
  EXPECT_EQ(e.Threshold({}), kInf);
}

TEST(NormScreen, HistoryIsCappedAtHistoryRounds) {
  NormScreen s(Opts(Robust::kClip, 3.0, 1.5, /*min_samples=*/1, /*history_rounds=*/2));
  s.Remember({100, 100, 100});
  s.Remember({1});
  // Both rounds count: samples 2 | 100 100 100 | 1 -> sorted 1 2 100 100 100: median 100,
  // |x - 100| = 99 98 0 0 0 -> MAD 0: max(100, 150) = 150.
  EXPECT_DOUBLE_EQ(s.Threshold({2}), 150.0);
  s.Remember({2});
  // The oldest round (the hundreds) is gone: samples 3 | 1 | 2: median 2, MAD 1.
  EXPECT_NEAR(s.Threshold({3}), 2 + 3 * kSigma, 1e-12);
  s.Remember({50});
  // Now 2 and 50 remain: samples 2 50: median 26, MAD 24.
  EXPECT_NEAR(s.Threshold({}), 26 + 3 * kSigma * 24, 1e-9);
  s.Remember({7});
  s.Remember({7});
  // Only the last two: 7 7: median 7, MAD 0 -> 10.5.
  EXPECT_DOUBLE_EQ(s.Threshold({}), 10.5);
}

TEST(NormScreen, ManyRoundsKeepOnlyTheLastFour) {
  NormScreen s(Opts(Robust::kClip, 3.0, 1.5, /*min_samples=*/4, /*history_rounds=*/4));
  for (int r = 0; r < 10; ++r) s.Remember({1000.0 + r});
  // Four rounds: samples 1006 1007 1008 1009 -> median 1007.5, MAD 1 -> max(1011.9478, 1511.25).
  // (Five rounds would give median 1007 -> 1510.5; all ten, median 1004.5 -> 1506.75.)
  EXPECT_NEAR(s.Threshold({}), 1.5 * 1007.5, 1e-9);
  NormScreen five(Opts(Robust::kClip, 3.0, 1.5, /*min_samples=*/5, /*history_rounds=*/4));
  for (int r = 0; r < 10; ++r) five.Remember({1.0});
  EXPECT_DOUBLE_EQ(five.Threshold({}), 4.0);  // only 4 samples remembered: 4 x the smallest
  EXPECT_DOUBLE_EQ(five.Threshold({1.0}), 1.5);
}

TEST(NormScreen, ZeroHistoryRoundsRemembersNothing) {
  NormScreen s(Opts(Robust::kClip, 3.0, 1.5, /*min_samples=*/3, /*history_rounds=*/0));
  s.Remember({1, 1, 1, 1});
  s.Remember({2, 2});
  EXPECT_DOUBLE_EQ(s.Threshold({5, 5}), 20.0);  // nothing remembered: two norms, 4 x the smaller
  EXPECT_DOUBLE_EQ(s.Threshold({5, 5, 5}), 7.5);
}

// SafeBound's promise: however the round ends (any `unknown` more norms, zeros, tiny or
// huge ones), the final threshold is at least the bound. Random rounds, histories and options.
TEST(NormScreen, SafeBoundHoldsForEveryWayTheRoundCanEnd) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto norm = [&] {
    const double r = unit(rng);
    if (r < 0.15) return 0.0;                 // an empty update
    if (r < 0.25) return 1e-9 * unit(rng);    // far below the rest
    if (r < 0.35) return 1e3 * (1 + unit(rng));  // an attacker
    return 0.5 + unit(rng);                   // honest
  };
  int promised = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    NormScreen s(Opts(Robust::kClip, 1 + 3 * unit(rng), 1 + unit(rng), 1 + rng() % 5, rng() % 5));
    for (int r = static_cast<int>(rng() % 5); r > 0; --r) {
      std::vector<double> accepted(rng() % 6);
      for (double& v : accepted) v = norm();
      s.Remember(accepted);
    }
    std::vector<double> known(rng() % 8);
    for (double& v : known) v = norm();
    const size_t unknown = rng() % 8;
    const double bound = s.SafeBound(known, unknown);
    promised += bound > 0;
    for (int ending = 0; ending < 4; ++ending) {
      std::vector<double> all = known;
      for (size_t i = 0; i < unknown; ++i)
        if (unit(rng) < 0.8) all.push_back(ending == 0 ? 1e-12 : norm());  // some never push
      ASSERT_GE(s.Threshold(all), bound) << "trial " << trial;
    }
  }
  EXPECT_GT(promised, 5000);  // and it promises something in most rounds with enough norms
}

TEST(NormScreen, SafeBoundFollowsTheLowestMedianTheRoundCanReach) {
  NormScreen s(Opts());
  EXPECT_EQ(s.SafeBound({1.0}, 3), 0.0);          // one norm, three to come: no promise
  EXPECT_EQ(s.SafeBound({1.0, 2.0}, 0), 4.0);     // nothing to come: Threshold (here the pair rule)
  s.Remember({1, 1, 1, 1});
  s.Remember({1, 1, 1, 1});
  // 8 remembered norms of 1, 4 pushes to come: the median of 12 can fall to the 2nd-smallest
  // known (1), never lower: 1.5 x 1.
  EXPECT_DOUBLE_EQ(s.SafeBound({}, 4), 1.5);
  EXPECT_EQ(s.SafeBound({}, 8), 0.0);             // 8 unknowns could outvote 8 known
  EXPECT_EQ(s.SafeBound({1.2}, 0), s.Threshold({1.2}));
  NormScreen off(Opts(Robust::kOff));
  EXPECT_EQ(off.SafeBound({}, 100), kInf);
}

TEST(ParseRobust, AcceptsTheThreeModes) {
  Robust r = Robust::kClip;
  ASSERT_TRUE(ParseRobust("off", &r));
  EXPECT_EQ(r, Robust::kOff);
  ASSERT_TRUE(ParseRobust("reject", &r));
  EXPECT_EQ(r, Robust::kReject);
  ASSERT_TRUE(ParseRobust("clip", &r));
  EXPECT_EQ(r, Robust::kClip);
}

TEST(ParseRobust, RefusesAnythingElse) {
  const std::vector<std::string> bads = {"",     "Off", "CLIP", "Reject",   " clip", "clip ", "clip\n",
                                         "none", "on",  "true", "clipping", "rejec", std::string("off\0x", 5)};
  for (const std::string& bad : bads) {
    Robust r = Robust::kReject;
    EXPECT_FALSE(ParseRobust(bad, &r)) << "'" << bad << "'";
    EXPECT_EQ(r, Robust::kReject) << "'" << bad << "' changed the output";
  }
}

}  // namespace
}  // namespace muloco
