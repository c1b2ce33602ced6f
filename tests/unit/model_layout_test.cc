// GPT layout: offsets tile the flat buffer, counts match the closed form, init is seeded,
// and run-config validation refuses bad values.
#include "common/model_layout.h"

#include <gtest/gtest.h>

#include "common/run_config.h"

namespace muloco {
namespace {

TEST(ModelLayout, OffsetsTileAndCountMatchesFormula) {
  v1::ModelSpec s = DefaultRunConfig().model();
  ParamLayout l = GptLayout(s);
  size_t off = 0;
  for (const ParamInfo& p : l) {
    EXPECT_EQ(p.offset, off) << p.name;
    off += p.numel;
  }
  const size_t V = s.vocab_size(), T = s.context(), d = s.d_model(), L = s.n_layer();
  EXPECT_EQ(TotalParams(l), 2 * V * d + T * d + L * (12 * d * d + 4 * d) + 2 * d);
  EXPECT_EQ(l.front().name, "wte");
  EXPECT_EQ(l.back().name, "lm_head.weight");
}

TEST(ModelLayout, InitIsDeterministicInSeed) {
  v1::ModelSpec s = DefaultRunConfig().model();
  ParamLayout l = GptLayout(s);
  std::vector<float> a = InitParams(s, l), b = InitParams(s, l);
  EXPECT_EQ(a, b);
  s.set_init_seed(s.init_seed() + 1);
  EXPECT_NE(a, InitParams(s, l));
  const ParamInfo& gain = l[2];
  ASSERT_EQ(gain.kind, ParamKind::kGain);
  EXPECT_EQ(a[gain.offset], 1.0f);
}

TEST(RunConfig, ValidationAndSchedule) {
  v1::RunConfig c = DefaultRunConfig();
  EXPECT_TRUE(ValidateRunConfig(c).ok());
  v1::RunConfig bad = c;
  bad.mutable_model()->set_n_head(3);
  EXPECT_EQ(ValidateRunConfig(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = c;
  bad.set_inner_steps(0);
  EXPECT_FALSE(ValidateRunConfig(bad).ok());
  bad = c;
  bad.set_uplink_codec("gzip");
  EXPECT_FALSE(ValidateRunConfig(bad).ok());
  bad = c;
  bad.set_inner_lr(NAN);
  EXPECT_FALSE(ValidateRunConfig(bad).ok());
  // Warmup rises linearly, the peak is reached, the end is the floor.
  EXPECT_NEAR(InnerLearningRate(c, 0), c.inner_lr() / c.warmup_steps(), 1e-9);
  EXPECT_NEAR(InnerLearningRate(c, c.warmup_steps() - 1), c.inner_lr(), 1e-9);
  EXPECT_NEAR(InnerLearningRate(c, c.warmup_steps()), c.inner_lr(), 1e-9);
  const uint64_t total = uint64_t{c.total_rounds()} * c.inner_steps();
  EXPECT_NEAR(InnerLearningRate(c, total), c.inner_lr() * c.inner_min_lr_ratio(), 1e-9);
  EXPECT_GT(InnerLearningRate(c, total / 2), InnerLearningRate(c, total - 1));
}

}  // namespace
}  // namespace muloco
