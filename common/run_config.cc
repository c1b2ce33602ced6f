// Run configuration defaults, validation and the inner learning-rate schedule.
#include "common/run_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/model_layout.h"

namespace muloco {

v1::RunConfig DefaultRunConfig() {
  v1::RunConfig c;
  v1::ModelSpec* m = c.mutable_model();
  m->set_vocab_size(256);
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_d_model(64);
  m->set_context(64);
  m->set_init_seed(1234);
  c.set_inner_steps(20);
  c.set_total_rounds(10);
  c.set_batch_size(16);
  c.set_inner_lr(3e-3f);
  c.set_inner_min_lr_ratio(0.1f);
  c.set_warmup_steps(20);
  c.set_weight_decay(0.1f);
  c.set_beta1(0.9f);
  c.set_beta2(0.95f);
  c.set_adam_eps(1e-8f);
  c.set_grad_clip(1.0f);
  // MuLoCo's 2-bit linear quantizer with error feedback, both ways (about 13x smaller than
  // dense fp32 on the demo model; tests/integration/test_compression.py holds it to dense).
  c.set_uplink_codec("linear:bits=2,chunk=256");
  c.set_downlink_codec("linear:bits=2,chunk=256");
  c.set_ef_beta(1.0f);
  c.set_data_seed(1);
  c.set_eval_every(1);
  c.set_eval_batches(8);
  return c;
}

absl::Status ValidateRunConfig(const v1::RunConfig& c) {
  if (absl::Status s = ValidateModelSpec(c.model()); !s.ok()) return s;
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("run config: " + m); };
  if (c.inner_steps() < 1) return bad("inner_steps (H) must be >= 1");
  if (c.total_rounds() < 1) return bad("total_rounds must be >= 1");
  if (c.batch_size() < 1 || c.batch_size() > 65536) return bad("batch_size must be in [1, 65536]");
  if (!(c.inner_lr() > 0 && c.inner_lr() < 10)) return bad("inner_lr must be in (0, 10)");
  if (!(c.inner_min_lr_ratio() >= 0 && c.inner_min_lr_ratio() <= 1)) return bad("inner_min_lr_ratio must be in [0, 1]");
  if (!(c.weight_decay() >= 0 && c.weight_decay() < 10)) return bad("weight_decay must be in [0, 10)");
  if (!(c.beta1() >= 0 && c.beta1() < 1 && c.beta2() >= 0 && c.beta2() < 1)) return bad("betas must be in [0, 1)");
  if (!(c.adam_eps() > 0 && c.adam_eps() < 1)) return bad("adam_eps must be in (0, 1)");
  if (!(c.grad_clip() >= 0 && std::isfinite(c.grad_clip()))) return bad("grad_clip must be >= 0 (0: off)");
  if (absl::Status s = ParseCodec(c.uplink_codec()).status(); !s.ok()) return s;
  if (absl::Status s = ParseCodec(c.downlink_codec()).status(); !s.ok()) return s;
  if (!(c.ef_beta() >= 0 && c.ef_beta() <= 1)) return bad("ef_beta must be in [0, 1]");
  return absl::OkStatus();
}

std::string DescribeRunConfig(const v1::RunConfig& c) {
  const v1::ModelSpec& m = c.model();
  return absl::StrCat("GPT(vocab ", m.vocab_size(), ", layers ", m.n_layer(), ", heads ", m.n_head(), ", d ",
                      m.d_model(), ", ctx ", m.context(), ") H=", c.inner_steps(), " rounds=", c.total_rounds(),
                      " batch=", c.batch_size(), " lr=", c.inner_lr(), " up=", c.uplink_codec(),
                      " down=", c.downlink_codec(), " ef_beta=", c.ef_beta());
}

double InnerLearningRate(const v1::RunConfig& c, uint64_t step) {
  const double peak = c.inner_lr();
  if (step < c.warmup_steps()) return peak * (step + 1) / c.warmup_steps();
  const double total = static_cast<double>(c.total_rounds()) * c.inner_steps();
  const double span = std::max(1.0, total - c.warmup_steps());
  const double progress = std::min(1.0, (step - c.warmup_steps()) / span);
  const double min_lr = peak * c.inner_min_lr_ratio();
  return min_lr + 0.5 * (peak - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace muloco
