// Flag definitions for the run configuration, resolved in one order: --preset picks a
// complete configuration (common/run_config.h), a --config file's fields override it, and
// every run-config flag given (on the command line, in a --flagfile or by --fromenv)
// overrides both. --print_config prints the result in the --config format and exits.
#include "common/run_config_flags.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/run_config.h"

namespace {
const muloco::v1::RunConfig& D() {
  static const muloco::v1::RunConfig d = muloco::DefaultRunConfig();
  return d;
}
}  // namespace

ABSL_FLAG(std::string, preset, muloco::kDefaultPreset,
          "Complete configuration: diloco, muloco, muloco-2bit, muloco-1bit, signmuon (a --config file and the "
          "flags below override it)");
ABSL_FLAG(std::string, config, "",
          "Run configuration file in protobuf text format (RunConfig, as --print_config writes it); its fields "
          "override the preset, flags override the file");
ABSL_FLAG(bool, print_config, false, "Print the resolved run configuration in the --config format and exit");
ABSL_FLAG(std::string, mode, D().mode(), "diloco (mean + outer SGD) or signmuon (majority vote)");
ABSL_FLAG(uint32_t, vocab_size, D().model().vocab_size(), "Model: vocabulary size (256 for bytes)");
ABSL_FLAG(uint32_t, n_layer, D().model().n_layer(), "Model: transformer layers");
ABSL_FLAG(uint32_t, n_head, D().model().n_head(), "Model: attention heads");
ABSL_FLAG(uint32_t, d_model, D().model().d_model(), "Model: embedding width");
ABSL_FLAG(uint32_t, context, D().model().context(), "Model: context length in tokens");
ABSL_FLAG(uint64_t, init_seed, D().model().init_seed(), "Model: initialisation seed");
ABSL_FLAG(uint32_t, inner_steps, D().inner_steps(), "H: inner optimizer steps per round");
ABSL_FLAG(uint32_t, rounds, D().total_rounds(), "Outer rounds in the run");
ABSL_FLAG(uint32_t, batch_size, D().batch_size(), "Sequences per inner step (per worker)");
ABSL_FLAG(std::string, inner_optimizer, D().inner_optimizer(), "adamw, or muon (Muon for hidden matrices, AdamW for the rest)");
ABSL_FLAG(float, inner_lr, D().inner_lr(), "Inner AdamW peak learning rate");
ABSL_FLAG(float, inner_min_lr_ratio, D().inner_min_lr_ratio(), "Cosine schedule floor, as a fraction of the peak");
ABSL_FLAG(uint32_t, warmup_steps, D().warmup_steps(), "Linear warmup steps of the inner schedule");
ABSL_FLAG(float, weight_decay, D().weight_decay(), "Decoupled weight decay of AdamW's tensors (embeddings, head; not gains, biases)");
ABSL_FLAG(float, muon_weight_decay, D().muon_weight_decay(), "Decoupled weight decay of the Muon matrices (W *= 1 - muon_lr * wd per step)");
ABSL_FLAG(float, beta1, D().beta1(), "Inner AdamW beta1");
ABSL_FLAG(float, beta2, D().beta2(), "Inner AdamW beta2");
ABSL_FLAG(float, adam_eps, D().adam_eps(), "Inner AdamW epsilon");
ABSL_FLAG(float, grad_clip, D().grad_clip(), "Gradient clipping max norm (0: off)");
ABSL_FLAG(float, muon_lr, D().muon_lr(), "Muon peak learning rate (same schedule as inner_lr)");
ABSL_FLAG(float, muon_momentum, D().muon_momentum(), "Muon momentum (EMA beta, Nesterov look-ahead)");
ABSL_FLAG(std::string, muon_scale, D().muon_scale(), "Muon update scale: shape (sqrt(max(1,rows/cols))) or adamw (0.2 sqrt(max(rows,cols)))");
ABSL_FLAG(uint32_t, ns_steps, D().ns_steps(), "Newton-Schulz iterations");
ABSL_FLAG(std::string, uplink_codec, D().uplink_codec(),
          "Worker->server codec: dense-fp32, dense-bf16, lloyd:bits=2,chunk=4096[,keep=0.9], quant:bits=2,chunk=4096, linear:bits=2,chunk=256, "
          "topk:chunk=4096,k=32,bits=2, sign:chunk=4096 (see codec/codec.h)");
ABSL_FLAG(std::string, downlink_codec, D().downlink_codec(), "Server->worker codec (same choices)");
ABSL_FLAG(float, ef_beta, D().ef_beta(), "Worker error-feedback decay: e <- ef_beta * e + delta");
ABSL_FLAG(float, outer_lr, D().outer_lr(), "Outer learning rate (diloco: SGD; signmuon: the vote's step)");
ABSL_FLAG(float, outer_momentum, D().outer_momentum(), "Outer SGD momentum (lr 1, momentum 0: plain averaging)");
ABSL_FLAG(bool, nesterov, D().outer_nesterov(), "Use Nesterov momentum in the outer step");
ABSL_FLAG(bool, signmuon_polar, D().signmuon_polar(), "signmuon: Newton-Schulz polar step on each matrix's vote");
ABSL_FLAG(uint64_t, data_seed, D().data_seed(), "Base data seed; each worker adds its join index (0 for the first to join)");
ABSL_FLAG(uint32_t, eval_every, D().eval_every(), "Rounds between validation evaluations (0: never)");
ABSL_FLAG(uint32_t, eval_batches, D().eval_batches(), "Validation batches per evaluation");

namespace muloco {
namespace {

using Setter = std::function<void(v1::RunConfig&)>;

// Each run-config flag and how it writes its field.
std::vector<std::pair<const char*, Setter>> Fields() {
#define F(flag, expr) {#flag, [](v1::RunConfig& c) { const auto v = absl::GetFlag(FLAGS_##flag); expr; }}
  return {
      F(mode, c.set_mode(v)),
      F(vocab_size, c.mutable_model()->set_vocab_size(v)),
      F(n_layer, c.mutable_model()->set_n_layer(v)),
      F(n_head, c.mutable_model()->set_n_head(v)),
      F(d_model, c.mutable_model()->set_d_model(v)),
      F(context, c.mutable_model()->set_context(v)),
      F(init_seed, c.mutable_model()->set_init_seed(v)),
      F(inner_steps, c.set_inner_steps(v)),
      F(rounds, c.set_total_rounds(v)),
      F(batch_size, c.set_batch_size(v)),
      F(inner_optimizer, c.set_inner_optimizer(v)),
      F(inner_lr, c.set_inner_lr(v)),
      F(inner_min_lr_ratio, c.set_inner_min_lr_ratio(v)),
      F(warmup_steps, c.set_warmup_steps(v)),
      F(weight_decay, c.set_weight_decay(v)),
      F(muon_weight_decay, c.set_muon_weight_decay(v)),
      F(beta1, c.set_beta1(v)),
      F(beta2, c.set_beta2(v)),
      F(adam_eps, c.set_adam_eps(v)),
      F(grad_clip, c.set_grad_clip(v)),
      F(muon_lr, c.set_muon_lr(v)),
      F(muon_momentum, c.set_muon_momentum(v)),
      F(muon_scale, c.set_muon_scale(v)),
      F(ns_steps, c.set_ns_steps(v)),
      F(uplink_codec, c.set_uplink_codec(v)),
      F(downlink_codec, c.set_downlink_codec(v)),
      F(ef_beta, c.set_ef_beta(v)),
      F(outer_lr, c.set_outer_lr(v)),
      F(outer_momentum, c.set_outer_momentum(v)),
      F(nesterov, c.set_outer_nesterov(v)),
      F(signmuon_polar, c.set_signmuon_polar(v)),
      F(data_seed, c.set_data_seed(v)),
      F(eval_every, c.set_eval_every(v)),
      F(eval_batches, c.set_eval_batches(v)),
  };
#undef F
}

}  // namespace

absl::StatusOr<v1::RunConfig> ResolveRunConfig(const std::string& config_file) {
  std::string file_text;
  v1::RunConfig from_file;
  const bool given = FlagGiven("config");
  const std::string path = given ? absl::GetFlag(FLAGS_config) : config_file;
  const std::string label = given ? absl::StrCat("--config=", path) : path;
  if (!path.empty()) {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(label, ": cannot read it"));
    file_text = *std::move(text);
    if (absl::Status s = MergeRunConfigText(file_text, &from_file); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
    }
  }
  // The preset: --preset if given, else the file's, else the default.
  const std::string preset = FlagGiven("preset") || from_file.preset().empty() ? absl::GetFlag(FLAGS_preset)
                                                                                : from_file.preset();
  absl::StatusOr<v1::RunConfig> c = PresetConfig(preset);
  if (!c.ok()) return c.status();
  if (!file_text.empty()) MergeRunConfigText(file_text, &*c).IgnoreError();  // parsed above
  c->set_preset(preset);
  for (const auto& [name, set] : Fields()) {
    if (FlagGiven(name)) set(*c);
  }
  return c;
}

bool FlagGiven(const std::string& name) {
  // absl records every flag its parser set, also from --flagfile and --fromenv (the public
  // CommandLineFlag::IsSpecifiedOnCommandLine is private in Debian's absl 20220623).
  return absl::flags_internal::WasPresentOnCommandLine(name);
}

v1::RunConfig RunConfigFromFlags(const std::string& config_file) {
  absl::StatusOr<v1::RunConfig> c = ResolveRunConfig(config_file);
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
    std::exit(2);
  }
  if (absl::GetFlag(FLAGS_print_config)) {
    std::fputs(RunConfigText(*c).c_str(), stdout);
    std::exit(0);
  }
  return *std::move(c);
}

}  // namespace muloco
