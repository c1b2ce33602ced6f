// Flag definitions for the run configuration; defaults come from DefaultRunConfig().
#include "common/run_config_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/run_config.h"

namespace {
const muloco::v1::RunConfig& D() {
  static const muloco::v1::RunConfig d = muloco::DefaultRunConfig();
  return d;
}
}  // namespace

ABSL_FLAG(uint32_t, vocab_size, D().model().vocab_size(), "Model: vocabulary size (256 for bytes)");
ABSL_FLAG(uint32_t, n_layer, D().model().n_layer(), "Model: transformer layers");
ABSL_FLAG(uint32_t, n_head, D().model().n_head(), "Model: attention heads");
ABSL_FLAG(uint32_t, d_model, D().model().d_model(), "Model: embedding width");
ABSL_FLAG(uint32_t, context, D().model().context(), "Model: context length in tokens");
ABSL_FLAG(uint64_t, init_seed, D().model().init_seed(), "Model: initialisation seed");
ABSL_FLAG(uint32_t, inner_steps, D().inner_steps(), "H: inner optimizer steps per round");
ABSL_FLAG(uint32_t, rounds, D().total_rounds(), "Outer rounds in the run");
ABSL_FLAG(uint32_t, batch_size, D().batch_size(), "Sequences per inner step (per worker)");
ABSL_FLAG(float, inner_lr, D().inner_lr(), "Inner AdamW peak learning rate");
ABSL_FLAG(float, inner_min_lr_ratio, D().inner_min_lr_ratio(), "Cosine schedule floor, as a fraction of inner_lr");
ABSL_FLAG(uint32_t, warmup_steps, D().warmup_steps(), "Linear warmup steps of the inner schedule");
ABSL_FLAG(float, weight_decay, D().weight_decay(), "Inner AdamW decoupled weight decay");
ABSL_FLAG(float, beta1, D().beta1(), "Inner AdamW beta1");
ABSL_FLAG(float, beta2, D().beta2(), "Inner AdamW beta2");
ABSL_FLAG(float, adam_eps, D().adam_eps(), "Inner AdamW epsilon");
ABSL_FLAG(float, grad_clip, D().grad_clip(), "Gradient clipping max norm (0: off)");
ABSL_FLAG(std::string, uplink_codec, D().uplink_codec(), "Worker->server codec: dense-fp32, dense-bf16, quant:bits=2,chunk=4096, linear:bits=4, topk:chunk=4096,k=32,bits=2, sign (see common/codec.h)");
ABSL_FLAG(std::string, downlink_codec, D().downlink_codec(), "Server->worker payload codec");
ABSL_FLAG(float, ef_beta, D().ef_beta(), "Worker error-feedback decay: e <- ef_beta * e + delta");
ABSL_FLAG(uint64_t, data_seed, D().data_seed(), "Base data seed; each worker adds its id");
ABSL_FLAG(uint32_t, eval_every, D().eval_every(), "Rounds between validation evaluations (0: never)");
ABSL_FLAG(uint32_t, eval_batches, D().eval_batches(), "Validation batches per evaluation");

namespace muloco {

v1::RunConfig RunConfigFromFlags() {
  v1::RunConfig c;
  v1::ModelSpec* m = c.mutable_model();
  m->set_vocab_size(absl::GetFlag(FLAGS_vocab_size));
  m->set_n_layer(absl::GetFlag(FLAGS_n_layer));
  m->set_n_head(absl::GetFlag(FLAGS_n_head));
  m->set_d_model(absl::GetFlag(FLAGS_d_model));
  m->set_context(absl::GetFlag(FLAGS_context));
  m->set_init_seed(absl::GetFlag(FLAGS_init_seed));
  c.set_inner_steps(absl::GetFlag(FLAGS_inner_steps));
  c.set_total_rounds(absl::GetFlag(FLAGS_rounds));
  c.set_batch_size(absl::GetFlag(FLAGS_batch_size));
  c.set_inner_lr(absl::GetFlag(FLAGS_inner_lr));
  c.set_inner_min_lr_ratio(absl::GetFlag(FLAGS_inner_min_lr_ratio));
  c.set_warmup_steps(absl::GetFlag(FLAGS_warmup_steps));
  c.set_weight_decay(absl::GetFlag(FLAGS_weight_decay));
  c.set_beta1(absl::GetFlag(FLAGS_beta1));
  c.set_beta2(absl::GetFlag(FLAGS_beta2));
  c.set_adam_eps(absl::GetFlag(FLAGS_adam_eps));
  c.set_grad_clip(absl::GetFlag(FLAGS_grad_clip));
  c.set_uplink_codec(absl::GetFlag(FLAGS_uplink_codec));
  c.set_downlink_codec(absl::GetFlag(FLAGS_downlink_codec));
  c.set_ef_beta(absl::GetFlag(FLAGS_ef_beta));
  c.set_data_seed(absl::GetFlag(FLAGS_data_seed));
  c.set_eval_every(absl::GetFlag(FLAGS_eval_every));
  c.set_eval_batches(absl::GetFlag(FLAGS_eval_batches));
  return c;
}

}  // namespace muloco
