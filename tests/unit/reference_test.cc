// Golden checks against PyTorch (Debian's python3-torch) run by tests/reference/torch_reference.py:
// the outer Nesterov step equals torch.optim.SGD(nesterov=True); H inner steps of our GPT and
// LLaMA with AdamW (or Muon and AdamW), schedule and clipping equal from-scratch PyTorch
// models with torch.optim.AdamW (and the reference's Muon); Muon
// steps equal an independent PyTorch Muon.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/model_layout.h"
#include "common/run_config.h"
#include "server/outer_optimizer.h"
#include "worker/data.h"
#include "worker/muon.h"
#include "worker/trainer.h"

namespace muloco {
namespace {

std::string TempDir(const char* name) {
  std::string dir = std::string(::testing::TempDir()) + "/muloco_ref_" + name + "_" + std::to_string(getpid());
  EXPECT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  return dir;
}

template <typename T>
void WriteRaw(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in) << path;
  std::vector<T> v(static_cast<size_t>(in.tellg()) / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), v.size() * sizeof(T));
  return v;
}

void RunReference(const std::string& mode, const std::string& dir) {
  const std::string cmd = "/usr/bin/python3 " MULOCO_SOURCE_DIR "/tests/reference/torch_reference.py " + mode + " " + dir;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

std::vector<float> Normal(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// torch.optim.SGD's parameters after each of the steps on `grads` (steps x n) from p0.
std::vector<float> TorchSgd(const char* name, const std::vector<float>& p0, const std::vector<float>& grads,
                            float lr, float momentum, bool nesterov) {
  const std::string dir = TempDir(name);
  WriteRaw(dir + "/p0.f32", p0);
  WriteRaw(dir + "/grads.f32", grads);
  std::ofstream(dir + "/config.json") << "{\"n\": " << p0.size() << ", \"steps\": " << grads.size() / p0.size()
                                      << ", \"lr\": " << lr << ", \"momentum\": " << momentum
                                      << ", \"nesterov\": " << (nesterov ? "true" : "false") << "}";
  RunReference("sgd", dir);
  return ReadRaw<float>(dir + "/expected.f32");
}

void ExpectOuterSgdMatchesTorch(float lr, float momentum, bool nesterov) {
  const size_t n = 1000, steps = 6;
  std::vector<float> p0 = Normal(n, 1, 1.0f), grads = Normal(n * steps, 2, 0.1f);
  const std::vector<float> expected = TorchSgd("sgd", p0, grads, lr, momentum, nesterov);
  ASSERT_EQ(expected.size(), n * steps);
  OuterSgd sgd(OuterSgdOptions{lr, momentum, nesterov}, n);
  std::vector<float> p = p0;
  for (size_t s = 0; s < steps; ++s) {
    sgd.Step(p.data(), grads.data() + s * n, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], expected[s * n + i], 1e-6f * (1 + std::fabs(expected[s * n + i]))) << "step " << s << " i " << i;
    }
  }
}

// Delayed Nesterov (momentum_every = N): after every N steps θ is where torch's SGD puts it
// stepping once on the mean of those N gradients.
void ExpectDelayedMomentumMatchesTorchOnMeans(bool nesterov) {
  const size_t n = 1000, every = 3, blocks = 4;
  const float lr = 0.7f, momentum = 0.6f;
  std::vector<float> p0 = Normal(n, 3, 1.0f), grads = Normal(n * every * blocks, 4, 0.1f), means(n * blocks, 0.0f);
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t k = 0; k < every; ++k) {
      for (size_t i = 0; i < n; ++i) means[b * n + i] += grads[(b * every + k) * n + i] / every;
    }
  }
  const std::vector<float> expected = TorchSgd("delayed", p0, means, lr, momentum, nesterov);
  ASSERT_EQ(expected.size(), n * blocks);
  OuterSgd sgd(OuterSgdOptions{lr, momentum, nesterov, every}, n);
  std::vector<float> p = p0;
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t k = 0; k < every; ++k) sgd.Step(p.data(), grads.data() + (b * every + k) * n, n);
    EXPECT_EQ(sgd.delayed_steps(), 0u);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], expected[b * n + i], 2e-6f * (1 + std::fabs(expected[b * n + i]))) << "block " << b << " i " << i;
    }
  }
  // Between the momentum's moves each step applies lr * g / N alone.
  const std::vector<float> before = p;
  sgd.Step(p.data(), grads.data(), n);
  EXPECT_EQ(sgd.delayed_steps(), 1u);
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(p[i], before[i] - lr * grads[i] / every) << i;
}

TEST(Reference, OuterNesterovSgdMatchesTorch) { ExpectOuterSgdMatchesTorch(0.7f, 0.9f, true); }
TEST(Reference, DelayedNesterovMatchesTorchOnTheMeans) { ExpectDelayedMomentumMatchesTorchOnMeans(true); }
TEST(Reference, DelayedPlainMomentumMatchesTorchOnTheMeans) { ExpectDelayedMomentumMatchesTorchOnMeans(false); }
TEST(Reference, OuterPlainMomentumMatchesTorch) { ExpectOuterSgdMatchesTorch(0.5f, 0.8f, false); }
TEST(Reference, OuterAveragingMatchesTorch) { ExpectOuterSgdMatchesTorch(1.0f, 0.0f, false); }

// H inner steps (AdamW, or Muon for the hidden matrices and AdamW for the rest) of the
// built-in model `m` through Trainer against the reference's own implementation of the same
// architecture and optimizers: each step's loss to 1e-5, the parameters to 2e-5.
void ExpectInnerStepsMatchTorch(const v1::ModelSpec& model, bool muon = false) {
  v1::RunConfig c = *PresetConfig("diloco");
  *c.mutable_model() = model;
  if (muon) {
    c.set_inner_optimizer("muon");
    c.set_muon_lr(0.02f);
    c.set_muon_weight_decay(0.05f);
  }
  v1::ModelSpec* m = c.mutable_model();
  c.set_batch_size(3);
  c.set_inner_steps(4);
  c.set_total_rounds(2);
  c.set_warmup_steps(3);
  c.set_inner_lr(1e-2f);
  c.set_inner_min_lr_ratio(0.1f);  // a decaying cosine (the preset's inner lr is constant)
  c.set_grad_clip(0.5f);  // small enough that clipping is active
  ASSERT_TRUE(ValidateRunConfig(c).ok()) << ValidateRunConfig(c);
  const size_t steps = 8;
  const ParamLayout layout = BuiltinLayout(*m);
  std::vector<float> params = InitParams(*m, layout);
  std::vector<int64_t> tokens(steps * c.batch_size() * (m->context() + 1));
  std::mt19937 rng(5);
  for (int64_t& t : tokens) t = rng() % m->vocab_size();

  const std::string dir = TempDir("adamw");
  WriteRaw(dir + "/params.f32", params);
  WriteRaw(dir + "/tokens.i64", tokens);
  std::ostringstream layout_json;
  for (size_t i = 0; i < layout.size(); ++i) {
    layout_json << (i ? ", " : "") << "[\"" << layout[i].name << "\", [";
    for (size_t j = 0; j < layout[i].shape.size(); ++j) layout_json << (j ? ", " : "") << layout[i].shape[j];
    layout_json << "], \"" << (UsesMuon(layout[i].group) ? "muon" : "adamw") << "\"]";
  }
  std::ofstream(dir + "/config.json")
      << "{\"steps\": " << steps << ", \"batch\": " << c.batch_size() << ", \"context\": " << m->context()
      << ", \"d_model\": " << m->d_model() << ", \"n_head\": " << m->n_head() << ", \"n_layer\": " << m->n_layer()
      << ", \"arch\": \"" << (IsLlama(*m) ? "llama" : "gpt") << "\", \"n_kv_head\": " << KvHeads(*m)
      << ", \"tie_embeddings\": " << (m->tie_embeddings() ? "true" : "false")
      << ", \"inner\": \"" << c.inner_optimizer() << "\", \"muon\": {\"lr\": " << c.muon_lr()
      << ", \"weight_decay\": " << c.muon_weight_decay() << ", \"momentum\": " << c.muon_momentum()
      << ", \"nesterov\": true, \"ns_steps\": " << c.ns_steps()
      << ", \"coeffs\": [3.4445, -4.7750, 2.0315], \"scale\": \"" << c.muon_scale() << "\"}"
      << ", \"inner_lr\": " << c.inner_lr() << ", \"warmup_steps\": " << c.warmup_steps()
      << ", \"total_rounds\": " << c.total_rounds() << ", \"inner_steps\": " << c.inner_steps()
      << ", \"min_lr_ratio\": " << c.inner_min_lr_ratio() << ", \"beta1\": " << c.beta1()
      << ", \"beta2\": " << c.beta2() << ", \"eps\": " << c.adam_eps() << ", \"weight_decay\": " << c.weight_decay()
      << ", \"grad_clip\": " << c.grad_clip() << ", \"layout\": [" << layout_json.str() << "]}";
  RunReference("adamw", dir);
  const std::vector<float> expected = ReadRaw<float>(dir + "/expected_params.f32");
  const std::vector<double> expected_losses = ReadRaw<double>(dir + "/expected_losses.f64");
  ASSERT_EQ(expected.size(), params.size());
  ASSERT_EQ(expected_losses.size(), steps);

  Corpus unused;
  unused.val.assign(100, 1);
  unused.train.assign(100, 1);
  c.set_eval_batches(0);
  Trainer trainer(c, &unused, 0);
  trainer.SetParams(params.data());
  const size_t row = c.batch_size() * (m->context() + 1);
  for (size_t s = 0; s < steps; ++s) {
    std::vector<int64_t> batch(tokens.begin() + s * row, tokens.begin() + (s + 1) * row);
    EXPECT_NEAR(trainer.InnerStepOn(batch, s), expected_losses[s], 1e-5) << "step " << s;
  }
  std::vector<float> ours(params.size());
  trainer.GetParams(ours.data());
  double max_diff = 0, moved = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ours[i] - expected[i])));
    moved = std::max(moved, static_cast<double>(std::fabs(expected[i] - params[i])));
  }
  EXPECT_GT(moved, 1e-2);      // the reference really trained
  EXPECT_LT(max_diff, 2e-5);   // and we land on the same parameters
}

v1::ModelSpec SmallSpec(const std::string& arch) {
  v1::ModelSpec m;
  m.set_arch(arch);
  m.set_n_layer(2);
  m.set_n_head(2);
  m.set_d_model(16);
  m.set_context(12);
  m.set_vocab_size(40);
  m.set_init_seed(1234);
  return m;
}

TEST(Reference, GptInnerAdamWStepsMatchTorch) { ExpectInnerStepsMatchTorch(SmallSpec("gpt")); }
TEST(Reference, GptInnerMuonStepsMatchTorch) { ExpectInnerStepsMatchTorch(SmallSpec("gpt"), /*muon=*/true); }

TEST(Reference, LlamaInnerAdamWStepsMatchTorch) {
  v1::ModelSpec m = SmallSpec("llama");
  m.set_n_head(4);
  m.set_n_kv_head(2);  // grouped-query attention: two query heads per key/value head
  m.set_ffn_dim(24);
  ExpectInnerStepsMatchTorch(m);
}

TEST(Reference, LlamaInnerMuonStepsMatchTorch) {
  v1::ModelSpec m = SmallSpec("llama");
  m.set_n_head(4);
  m.set_n_kv_head(2);
  ExpectInnerStepsMatchTorch(m, /*muon=*/true);
}

TEST(Reference, LlamaTiedInnerAdamWStepsMatchTorch) {
  v1::ModelSpec m = SmallSpec("llama");
  m.set_tie_embeddings(true);  // ffn_dim 0: the default width, 48 for d_model 16
  ExpectInnerStepsMatchTorch(m);
}

void ExpectMuonMatchesTorch(bool nesterov, MuonScale scale) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{16, 24}, {40, 12}, {8, 8}};
  const size_t steps = 5;
  size_t n = 0;
  for (auto [r, c] : shapes) n += r * c;
  const std::vector<float> flat = Normal(n, 21, 0.5f), grads = Normal(n * steps, 22, 0.1f);
  const std::string dir = TempDir("muon");
  WriteRaw(dir + "/params.f32", flat);
  WriteRaw(dir + "/grads.f32", grads);
  MuonOptions o;
  o.nesterov = nesterov;
  o.scale = scale;
  o.weight_decay = 0.1;
  const double lr = 0.02;
  std::ofstream(dir + "/config.json") << "{\"shapes\": [[16, 24], [40, 12], [8, 8]], \"steps\": " << steps
                                      << ", \"momentum\": " << o.momentum << ", \"nesterov\": "
                                      << (nesterov ? "true" : "false") << ", \"ns_steps\": " << o.ns_steps
                                      << ", \"coeffs\": [3.4445, -4.7750, 2.0315], \"scale\": \""
                                      << (scale == MuonScale::kShape ? "shape" : "adamw") << "\", \"lr\": " << lr
                                      << ", \"weight_decay\": " << o.weight_decay << "}";
  RunReference("muon", dir);
  const std::vector<float> expected = ReadRaw<float>(dir + "/expected.f32");
  ASSERT_EQ(expected.size(), n);

  std::vector<torch::Tensor> params;
  size_t off = 0;
  for (auto [r, c] : shapes) {
    params.push_back(torch::from_blob(const_cast<float*>(flat.data() + off), {r, c}).clone());
    off += r * c;
  }
  Muon muon(params, o);
  for (size_t s = 0; s < steps; ++s) {
    off = 0;
    for (torch::Tensor& p : params) {
      p.mutable_grad() = torch::from_blob(const_cast<float*>(grads.data() + s * n + off), p.sizes()).clone();
      off += p.numel();
    }
    muon.Step(lr);
  }
  off = 0;
  double max_diff = 0, moved = 0;
  for (const torch::Tensor& p : params) {
    const float* v = p.data_ptr<float>();
    for (int64_t i = 0; i < p.numel(); ++i, ++off) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(v[i] - expected[off])));
      moved = std::max(moved, static_cast<double>(std::fabs(expected[off] - flat[off])));
    }
  }
  EXPECT_GT(moved, 0.01);
  EXPECT_LT(max_diff, 1e-5);
}

TEST(Reference, MuonNesterovStepsMatchTorch) { ExpectMuonMatchesTorch(true, MuonScale::kShape); }
TEST(Reference, MuonPlainMomentumAdamWScaleMatchesTorch) { ExpectMuonMatchesTorch(false, MuonScale::kMatchAdamW); }

}  // namespace
}  // namespace muloco
