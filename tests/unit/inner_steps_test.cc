// Token-weighted merging and adaptive H in the round engine: a push weighs its inner steps
// / H (read off θ with plain averaging), a claim over the cap counts as the cap, the pace is
// the lower median of the reported step times, and a slow session is told fewer steps.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "server/round_engine.h"

namespace muloco {
namespace {

std::string Dense(const std::vector<float>& v) { return Encode(DenseSegments(v.size()), v.data()); }

constexpr uint32_t kH = 10;

EngineOptions Options(bool adaptive) {
  EngineOptions o;
  o.outer = OuterSgdOptions{1.0f, 0.0f, false};  // θ -= g: the weights can be read off θ
  o.screen.mode = Robust::kOff;
  o.round_timeout_s = 10;
  o.heartbeat_timeout_s = 100;
  o.inner_steps = kH;
  o.adaptive_h = adaptive;
  return o;
}

struct Engine {
  explicit Engine(bool adaptive = false) : engine(Options(adaptive), std::vector<float>(4, 0.0f), &clock) {}
  float Theta() { return (*engine.Snapshot().params)[0]; }
  void Report(uint64_t id, double step_s) {
    WorkerStats st;
    st.inner_step_seconds = step_s;
    ASSERT_TRUE(engine.Report(id, st).ok());
  }
  FakeClock clock;
  RoundEngine engine;
};

// g = Σ (steps_i / H) Δ_i / Σ (steps_i / H): a push of 5 of 10 steps weighs half.
TEST(InnerSteps, APushWeighsItsStepsOverH) {
  Engine r;
  auto a = r.engine.Join("a"), b = r.engine.Join("b");
  ASSERT_TRUE(r.engine.Push(a.worker_id, 0, Dense({1, 1, 1, 1}), kH).ok());
  ASSERT_TRUE(r.engine.Push(b.worker_id, 0, Dense({4, 4, 4, 4}), 5).ok());
  ASSERT_EQ(r.engine.OpenRound(), 1u);
  EXPECT_FLOAT_EQ(r.Theta(), -(1 * 1.0f + 0.5f * 4) / 1.5f);
  EXPECT_EQ(r.engine.Stats().inner_steps_accepted, kH + 5);
  // 0 says "H": both full, the plain mean.
  ASSERT_TRUE(r.engine.Push(a.worker_id, 1, Dense({1, 1, 1, 1}), 0).ok());
  ASSERT_TRUE(r.engine.Push(b.worker_id, 1, Dense({3, 3, 3, 3}), 0).ok());
  EXPECT_FLOAT_EQ(r.Theta(), -2.0f - 2.0f);
  EXPECT_EQ(r.engine.Stats().capped_step_claims, 0u);
}

// Without adaptive H the cap is H: a claim of 1000 steps weighs as H, and is counted.
TEST(InnerSteps, AClaimAboveHIsCountedAsH) {
  Engine r;
  auto a = r.engine.Join("a"), liar = r.engine.Join("liar");
  ASSERT_TRUE(r.engine.Push(a.worker_id, 0, Dense({1, 1, 1, 1}), kH).ok());
  ASSERT_TRUE(r.engine.Push(liar.worker_id, 0, Dense({3, 3, 3, 3}), 1000).ok());
  EXPECT_FLOAT_EQ(r.Theta(), -2.0f);  // equal weights
  const EngineStats st = r.engine.Stats();
  EXPECT_EQ(st.capped_step_claims, 1u);
  EXPECT_EQ(st.inner_steps_accepted, 2 * kH);
}

// Adaptive H: the pace is the median of the live participants' seconds per step at the last
// close; a session 4x slower than it is told floor(10 / 4) = 2 steps, one within 20% of
// it all 10, and a minority reporting absurdly fast steps cannot move the pace. Before any
// close (no pace) everyone is told H.
TEST(InnerSteps, ASlowSessionIsToldFewerSteps) {
  Engine r(/*adaptive=*/true);
  auto a = r.engine.Join("a"), b = r.engine.Join("b"), c = r.engine.Join("c"), slow = r.engine.Join("slow"),
       liar = r.engine.Join("liar");
  r.Report(a.worker_id, 1.0);
  r.Report(b.worker_id, 1.0);
  r.Report(c.worker_id, 1.1);
  r.Report(slow.worker_id, 4.0);
  r.Report(liar.worker_id, 0.001);
  EXPECT_EQ(r.engine.TellInnerSteps(slow.worker_id), kH);  // no pace yet
  for (auto w : {a, b, c, slow, liar}) ASSERT_TRUE(r.engine.Push(w.worker_id, 0, Dense({1, 1, 1, 1})).ok());
  ASSERT_EQ(r.engine.OpenRound(), 1u);
  EXPECT_EQ(r.engine.TellInnerSteps(a.worker_id), kH);
  EXPECT_EQ(r.engine.TellInnerSteps(c.worker_id), kH);  // 9.09 steps: within 20% of H
  EXPECT_EQ(r.engine.TellInnerSteps(slow.worker_id), 2u);
  EXPECT_EQ(r.engine.TellInnerSteps(liar.worker_id), kH);  // never more than H
  EXPECT_EQ(r.engine.TellInnerSteps(12345), 0u);  // unknown session
  EXPECT_GE(r.engine.Stats().steps_told_below_h, 1u);
}

// The cap follows what a session was told: a round starts when the push before it leaves
// (overlap), so a push may hold the steps of any tell it held from the acceptance of the push
// before its previous one on (H at first); a claim above that counts as the cap.
TEST(InnerSteps, AClaimAboveWhatWasToldIsCappedToIt) {
  Engine r(/*adaptive=*/true);
  auto a = r.engine.Join("a"), b = r.engine.Join("b"), slow = r.engine.Join("slow");
  r.Report(a.worker_id, 1.0);
  r.Report(b.worker_id, 1.0);
  r.Report(slow.worker_id, 4.0);
  auto round = [&](float slow_value, uint32_t slow_claim) {
    ASSERT_TRUE(r.engine.Push(a.worker_id, r.engine.OpenRound(), Dense({1, 1, 1, 1}), kH).ok());
    ASSERT_TRUE(r.engine.Push(b.worker_id, r.engine.OpenRound(), Dense({1, 1, 1, 1}), kH).ok());
    ASSERT_TRUE(r.engine.Push(slow.worker_id, r.engine.OpenRound(), Dense(std::vector<float>(4, slow_value)), slow_claim).ok());
  };
  round(1, kH);  // round 0: everyone's full push; the pace is set at the close
  ASSERT_EQ(r.engine.OpenRound(), 1u);
  ASSERT_EQ(r.engine.TellInnerSteps(slow.worker_id), 2u);
  // Rounds 1 and 2: H steps, from rounds that may have started before the tell of 2.
  for (int i = 0; i < 2; ++i) {
    const float before = r.Theta();
    round(6, kH);
    EXPECT_FLOAT_EQ(r.Theta(), before - (1 + 1 + 6) / 3.0f);
  }
  EXPECT_EQ(r.engine.Stats().capped_step_claims, 0u);
  // Round 3: it held 2 since round 1's push was taken and claims 1000: counted as 2 (weight 0.2).
  const float before = r.Theta();
  round(6, 1000);
  EXPECT_FLOAT_EQ(r.Theta(), before - (1 + 1 + 0.2f * 6) / 2.2f);
  const EngineStats st = r.engine.Stats();
  EXPECT_EQ(st.capped_step_claims, 1u);
  EXPECT_EQ(st.inner_steps_accepted, 3 * kH + 3 * kH + 3 * kH + 2 * kH + 2);
}

}  // namespace
}  // namespace muloco
