// Layouts: the GPT's and LLaMA's offsets tile the flat buffer, counts match the closed form, init is
// seeded; the Muon rule, the layout checks, the named difference and the wire form; and
// run-config validation refuses bad values.
#include "common/model_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

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
  ASSERT_EQ(gain.name, "h.0.ln1.weight");
  ASSERT_EQ(gain.group, ParamGroup::kAdamWNoDecay);
  EXPECT_EQ(a[gain.offset], 1.0f);
}

TEST(ModelLayout, TheDefaultRuleGroupsTheGptAsItIsBuilt) {
  const ParamLayout gpt = GptLayout(DefaultRunConfig().model());
  ParamLayout regrouped = gpt;
  for (ParamInfo& p : regrouped) p.group = ParamGroup::kAdamW;
  ASSERT_TRUE(AssignGroups(kDefaultAdamwParams, &regrouped).ok());
  for (size_t i = 0; i < gpt.size(); ++i) EXPECT_EQ(regrouped[i].group, gpt[i].group) << gpt[i].name;
  EXPECT_EQ(gpt[0].group, ParamGroup::kAdamW);  // wte
  EXPECT_EQ(gpt[4].group, ParamGroup::kMuon);   // h.0.attn.qkv.weight
  for (const ParamInfo& p : gpt) {  // embeddings and head AdamW, gains and biases no decay, the rest Muon
    const ParamGroup want = p.shape.size() == 1                                            ? ParamGroup::kAdamWNoDecay
                            : p.name == "wte" || p.name == "wpe" || p.name == "lm_head.weight" ? ParamGroup::kAdamW
                                                                                               : ParamGroup::kMuon;
    EXPECT_EQ(p.group, want) << p.name;
  }
}

v1::ModelSpec LlamaSpec(uint32_t n_kv_head, bool tied) {
  v1::ModelSpec s = DefaultRunConfig().model();
  s.set_arch("llama");
  s.set_n_kv_head(n_kv_head);
  s.set_tie_embeddings(tied);
  return s;
}

TEST(ModelLayout, LlamaHasHuggingFaceNamesAndTheClosedFormCount) {
  const v1::ModelSpec s = LlamaSpec(/*n_kv_head=*/2, /*tied=*/false);  // 4 query heads, 2 key/value heads
  ASSERT_TRUE(ValidateModelSpec(s).ok()) << ValidateModelSpec(s);
  const ParamLayout l = BuiltinLayout(s);
  const size_t V = s.vocab_size(), d = s.d_model(), L = s.n_layer(), kv = d / 2, f = FfnDim(s);
  EXPECT_EQ(f, 176u);  // 8/3 * 64 = 170.7, up to a multiple of 8
  EXPECT_EQ(TotalParams(l), 2 * V * d + L * (2 * d * d + 2 * kv * d + 3 * f * d + 2 * d) + d);
  EXPECT_EQ(l.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(l[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(l[3].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(l[3].shape, (std::vector<int64_t>{static_cast<int64_t>(kv), static_cast<int64_t>(d)}));
  EXPECT_EQ(l[9].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(l.back().name, "lm_head.weight");
  for (const ParamInfo& p : l) {  // the default rule: embeddings and head AdamW, hidden matrices Muon
    const ParamGroup want = p.shape.size() == 1 ? ParamGroup::kAdamWNoDecay
                            : p.name == "model.embed_tokens.weight" || p.name == "lm_head.weight" ? ParamGroup::kAdamW
                                                                                                  : ParamGroup::kMuon;
    EXPECT_EQ(p.group, want) << p.name;
  }
  const ParamLayout tied = BuiltinLayout(LlamaSpec(0, true));
  EXPECT_EQ(TotalParams(tied), TotalParams(l) - V * d + L * 2 * (d - kv) * d);  // no head; full-width k, v
  EXPECT_EQ(tied.back().name, "model.norm.weight");
  // Residual projections start smaller (GPT-2's 1/sqrt(2 n_layer)), the others do not.
  const std::vector<float> init = InitParams(s, l);
  auto rms = [&](const ParamInfo& p) {
    double sum = 0;
    for (size_t i = 0; i < p.numel; ++i) sum += init[p.offset + i] * init[p.offset + i];
    return std::sqrt(sum / p.numel);
  };
  EXPECT_NEAR(rms(l[2]), 0.02, 0.002);                                   // q_proj
  EXPECT_NEAR(rms(l[5]), 0.02 / std::sqrt(2.0 * L), 0.002);              // o_proj
  EXPECT_NEAR(rms(l[9]), 0.02 / std::sqrt(2.0 * L), 0.002);              // down_proj
  EXPECT_EQ(init[l[1].offset], 1.0f);                                    // RMSNorm gain
}

TEST(ModelLayout, LlamaSpecsAreChecked) {
  EXPECT_FALSE(ValidateModelSpec(LlamaSpec(3, false)).ok());  // 3 does not divide 4 heads
  EXPECT_FALSE(ValidateModelSpec(LlamaSpec(8, false)).ok());  // more key/value heads than heads
  v1::ModelSpec gpt = DefaultRunConfig().model();
  gpt.set_n_kv_head(2);
  EXPECT_FALSE(ValidateModelSpec(gpt).ok());  // llama's fields on a GPT
  v1::ModelSpec odd = LlamaSpec(0, false);
  odd.set_n_head(64);  // head width 1: rotary needs pairs
  EXPECT_FALSE(ValidateModelSpec(odd).ok());
  v1::ModelSpec unknown = DefaultRunConfig().model();
  unknown.set_arch("mamba");
  EXPECT_FALSE(ValidateModelSpec(unknown).ok());
}

TEST(ModelLayout, TheRuleCoversOtherConventionsAndCanBeChanged) {
  ParamLayout l = {{"model.embed_tokens.weight", {100, 8}}, {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
                   {"model.layers.0.input_layernorm.weight", {8}}, {"tok_embeddings.weight", {100, 8}},
                   {"output.weight", {100, 8}}, {"conv.weight", {4, 3, 3, 3}}, {"temperature", {}},
                   {"lm_head.weight", {100, 8}}, {"head_proj.weight", {8, 8}}};
  PlaceTensors(&l);
  ASSERT_TRUE(AssignGroups(kDefaultAdamwParams, &l).ok());
  const std::vector<ParamGroup> want = {ParamGroup::kAdamW, ParamGroup::kMuon, ParamGroup::kAdamWNoDecay,
                                        ParamGroup::kAdamW, ParamGroup::kAdamW, ParamGroup::kAdamW,
                                        ParamGroup::kAdamWNoDecay, ParamGroup::kAdamW, ParamGroup::kMuon};
  for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l[i].group, want[i]) << l[i].name;
  ASSERT_TRUE(AssignGroups("q_proj", &l).ok());
  EXPECT_EQ(l[1].group, ParamGroup::kAdamW);
  EXPECT_EQ(l[0].group, ParamGroup::kMuon);  // no longer named by the rule
  EXPECT_EQ(AssignGroups("(", &l).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(l[6].numel, 1u);  // a scalar is one element
  EXPECT_EQ(TotalParams(l), 100 * 8 * 4 + 8 * 8 * 2 + 8 + 4 * 27 + 1);
}

TEST(ModelLayout, DifferencesAreNamedAndBadLayoutsRefused) {
  ParamLayout run = {{"a.weight", {4, 2}}, {"b.bias", {4}}};
  PlaceTensors(&run);
  ParamLayout same = {{"b.bias", {4}}, {"a.weight", {4, 2}}};  // another order holds the same tensors
  EXPECT_EQ(LayoutDifference(run, same), "");
  ParamLayout wider = {{"a.weight", {4, 3}}, {"b.bias", {4}}};
  EXPECT_EQ(LayoutDifference(run, wider), "tensor a.weight: shape [4, 3] here, [4, 2] in the run");
  ParamLayout renamed = {{"a.weight", {4, 2}}, {"b.beta", {4}}};
  EXPECT_EQ(LayoutDifference(run, renamed), "tensor b.bias [4] of the run is missing here");
  ParamLayout extra = run;
  extra.push_back({"c", {1}});
  EXPECT_EQ(LayoutDifference(run, extra), "tensor c is not in the run's model");

  v1::ModelLayout wire = LayoutProto(run);
  absl::StatusOr<ParamLayout> back = LayoutFromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)[1].offset, 8u);
  EXPECT_EQ((*back)[0].group, run[0].group);
  for (auto spoil : std::vector<std::function<void(v1::ModelLayout*)>>{
           [](v1::ModelLayout* m) { m->mutable_tensors(1)->set_name("a.weight"); },     // twice
           [](v1::ModelLayout* m) { m->mutable_tensors(0)->set_shape(0, -4); },          // negative
           [](v1::ModelLayout* m) { m->mutable_tensors(0)->set_name("a weight"); },      // not printable
           [](v1::ModelLayout* m) { m->mutable_tensors(0)->set_shape(1, 1LL << 40); },   // too large
           [](v1::ModelLayout* m) { m->mutable_tensors(0)->set_group(static_cast<v1::TensorGroup>(9)); },
           [](v1::ModelLayout* m) { m->clear_tensors(); }}) {
    v1::ModelLayout bad = wire;
    spoil(&bad);
    EXPECT_EQ(LayoutFromProto(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad.DebugString();
  }
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
