// Presets, validation and the inner learning-rate schedule.
#include "common/run_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/codec.h"
#include "common/model_layout.h"

namespace muloco {
namespace {

// What every preset shares: the demo model, data and schedule.
v1::RunConfig Base() {
  v1::RunConfig c;
  v1::ModelSpec* m = c.mutable_model();
  m->set_vocab_size(256);
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_d_model(64);
  m->set_context(64);
  m->set_init_seed(1234);
  c.set_mode("diloco");
  c.set_inner_steps(20);
  c.set_total_rounds(10);
  c.set_batch_size(16);
  c.set_inner_optimizer("adamw");
  c.set_inner_lr(3e-3f);
  c.set_inner_min_lr_ratio(0.1f);
  c.set_warmup_steps(20);
  c.set_weight_decay(0.1f);
  c.set_beta1(0.9f);
  c.set_beta2(0.95f);
  c.set_adam_eps(1e-8f);
  c.set_grad_clip(1.0f);
  c.set_muon_lr(0.02f);
  c.set_muon_momentum(0.95f);
  c.set_muon_scale("shape");
  c.set_ns_steps(5);
  c.set_uplink_codec("dense-fp32");
  c.set_downlink_codec("dense-fp32");
  c.set_ef_beta(1.0f);
  c.set_outer_lr(0.7f);
  c.set_outer_momentum(0.9f);
  c.set_outer_nesterov(true);
  c.set_signmuon_polar(false);
  c.set_data_seed(1);
  c.set_eval_every(1);
  c.set_eval_batches(8);
  return c;
}

constexpr char kTwoBit[] = "lloyd:bits=2,chunk=512";  // 2.03 bits per element: codes + a 4-float table per chunk

}  // namespace

std::vector<std::string> PresetNames() { return {"diloco", "muloco", "muloco-2bit", "sparseloco", "signmuon"}; }

absl::StatusOr<v1::RunConfig> PresetConfig(absl::string_view name) {
  v1::RunConfig c = Base();
  c.set_preset(std::string(name));
  if (name == "diloco") return c;
  if (name == "muloco" || name == "muloco-2bit") {
    c.set_inner_optimizer("muon");
    c.set_outer_momentum(0.6f);  // MuLoCo's README: outer lr 0.7, momentum 0.6
    if (name == "muloco-2bit") {
      c.set_uplink_codec(kTwoBit);
      c.set_downlink_codec(kTwoBit);
    }
    return c;
  }
  if (name == "sparseloco") {
    c.set_uplink_codec("topk:chunk=4096,k=32,bits=2");
    c.set_downlink_codec(kTwoBit);
    c.set_ef_beta(0.999f);
    c.set_outer_lr(1.0f);
    c.set_outer_momentum(0.0f);
    c.set_outer_nesterov(false);
    return c;
  }
  if (name == "signmuon") {
    c.set_mode("signmuon");
    c.set_inner_optimizer("muon");
    c.set_inner_steps(1);
    c.set_total_rounds(200);
    c.set_warmup_steps(10);
    c.set_uplink_codec("sign:chunk=4096,vectors=same");
    c.set_downlink_codec("quant:bits=2,chunk=4096");  // the vote's {-lr, 0, +lr} is exact in 2 bits
    c.set_outer_lr(3e-3f);                              // sign steps: |ΔW| = lr per coordinate
    c.set_outer_momentum(0.0f);                         // momentum lives in each worker's Muon
    c.set_outer_nesterov(false);
    c.set_eval_every(20);
    return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", name, "' (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
}

v1::RunConfig DefaultRunConfig() { return *PresetConfig(kDefaultPreset); }

absl::Status ValidateRunConfig(const v1::RunConfig& c) {
  if (absl::Status s = ValidateModelSpec(c.model()); !s.ok()) return s;
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("run config: " + m); };
  if (c.mode() != "diloco" && c.mode() != "signmuon") return bad("mode must be diloco or signmuon");
  if (c.inner_steps() < 1) return bad("inner_steps (H) must be >= 1");
  if (c.total_rounds() < 1) return bad("total_rounds must be >= 1");
  if (c.batch_size() < 1 || c.batch_size() > 65536) return bad("batch_size must be in [1, 65536]");
  if (c.inner_optimizer() != "adamw" && c.inner_optimizer() != "muon") return bad("inner_optimizer must be adamw or muon");
  if (!(c.inner_lr() > 0 && c.inner_lr() < 10)) return bad("inner_lr must be in (0, 10)");
  if (!(c.muon_lr() > 0 && c.muon_lr() < 10)) return bad("muon_lr must be in (0, 10)");
  if (!(c.muon_momentum() >= 0 && c.muon_momentum() < 1)) return bad("muon_momentum must be in [0, 1)");
  if (c.muon_scale() != "shape" && c.muon_scale() != "adamw") return bad("muon_scale must be shape or adamw");
  if (c.ns_steps() < 1 || c.ns_steps() > 100) return bad("ns_steps must be in [1, 100]");
  if (!(c.inner_min_lr_ratio() >= 0 && c.inner_min_lr_ratio() <= 1)) return bad("inner_min_lr_ratio must be in [0, 1]");
  if (!(c.weight_decay() >= 0 && c.weight_decay() < 10)) return bad("weight_decay must be in [0, 10)");
  if (!(c.beta1() >= 0 && c.beta1() < 1 && c.beta2() >= 0 && c.beta2() < 1)) return bad("betas must be in [0, 1)");
  if (!(c.adam_eps() > 0 && c.adam_eps() < 1)) return bad("adam_eps must be in (0, 1)");
  if (!(c.grad_clip() >= 0 && std::isfinite(c.grad_clip()))) return bad("grad_clip must be >= 0 (0: off)");
  if (!(c.ef_beta() >= 0 && c.ef_beta() <= 1)) return bad("ef_beta must be in [0, 1]");
  if (!(c.outer_lr() > 0 && c.outer_lr() < 10)) return bad("outer_lr must be in (0, 10)");
  if (!(c.outer_momentum() >= 0 && c.outer_momentum() < 1)) return bad("outer_momentum must be in [0, 1)");
  absl::StatusOr<CodecConfig> up = ParseCodec(c.uplink_codec());
  if (!up.ok()) return up.status();
  if (absl::Status s = ParseCodec(c.downlink_codec()).status(); !s.ok()) return s;
  if (c.mode() == "signmuon") {
    if (up->scheme != Scheme::kSign || up->dense_vectors) return bad("signmuon needs uplink_codec sign:...,vectors=same");
    if (c.inner_steps() != 1) return bad("signmuon takes one step per round (inner_steps 1)");
    if (c.inner_optimizer() != "muon") return bad("signmuon needs inner_optimizer muon");
  }
  return absl::OkStatus();
}

std::string DescribeRunConfig(const v1::RunConfig& c) {
  const v1::ModelSpec& m = c.model();
  return absl::StrCat(c.preset().empty() ? "" : c.preset() + ": ", c.mode(), ", GPT(vocab ", m.vocab_size(),
                      ", layers ", m.n_layer(), ", heads ", m.n_head(), ", d ", m.d_model(), ", ctx ", m.context(),
                      ") H=", c.inner_steps(), " rounds=", c.total_rounds(), " batch=", c.batch_size(), " inner=",
                      c.inner_optimizer(), " lr=", c.inner_lr(),
                      c.inner_optimizer() == "muon" ? absl::StrCat(" muon_lr=", c.muon_lr()) : "",
                      " outer lr=", c.outer_lr(), " m=", c.outer_momentum(), " up=", c.uplink_codec(),
                      " down=", c.downlink_codec(), " ef_beta=", c.ef_beta());
}

double LearningRateFactor(const v1::RunConfig& c, uint64_t step) {
  if (step < c.warmup_steps()) return static_cast<double>(step + 1) / c.warmup_steps();
  const double total = static_cast<double>(c.total_rounds()) * c.inner_steps();
  const double span = std::max(1.0, total - c.warmup_steps());
  const double progress = std::min(1.0, (step - c.warmup_steps()) / span);
  const double floor = c.inner_min_lr_ratio();
  return floor + 0.5 * (1.0 - floor) * (1.0 + std::cos(M_PI * progress));
}

double InnerLearningRate(const v1::RunConfig& c, uint64_t step) { return c.inner_lr() * LearningRateFactor(c, step); }

}  // namespace muloco
