// GPT parameter layout and initialisation (see model_layout.h).
#include "common/model_layout.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace muloco {

absl::Status ValidateModelSpec(const v1::ModelSpec& s) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("model spec: " + m); };
  if (s.vocab_size() < 2 || s.vocab_size() > 65536) return bad("vocab_size must be in [2, 65536]");
  if (s.n_layer() < 1 || s.n_layer() > 256) return bad("n_layer must be in [1, 256]");
  if (s.n_head() < 1 || s.d_model() < 1 || s.d_model() > 16384) return bad("d_model must be in [1, 16384]");
  if (s.d_model() % s.n_head() != 0) return bad("d_model must be divisible by n_head");
  if (s.context() < 1 || s.context() > 65536) return bad("context must be in [1, 65536]");
  return absl::OkStatus();
}

ParamLayout GptLayout(const v1::ModelSpec& s) {
  const int64_t V = s.vocab_size(), T = s.context(), d = s.d_model();
  ParamLayout layout;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamKind kind) {
    ParamInfo p{std::move(name), std::move(shape), kind};
    p.numel = 1;
    for (int64_t dim : p.shape) p.numel *= static_cast<size_t>(dim);
    layout.push_back(std::move(p));
  };
  add("wte", {V, d}, ParamKind::kEmbedding);
  add("wpe", {T, d}, ParamKind::kEmbedding);
  for (uint32_t i = 0; i < s.n_layer(); ++i) {
    const std::string h = absl::StrCat("h.", i, ".");
    add(h + "ln1.weight", {d}, ParamKind::kGain);
    add(h + "ln1.bias", {d}, ParamKind::kBias);
    add(h + "attn.qkv.weight", {3 * d, d}, ParamKind::kMatrix);
    add(h + "attn.proj.weight", {d, d}, ParamKind::kMatrix);
    add(h + "ln2.weight", {d}, ParamKind::kGain);
    add(h + "ln2.bias", {d}, ParamKind::kBias);
    add(h + "mlp.fc.weight", {4 * d, d}, ParamKind::kMatrix);
    add(h + "mlp.proj.weight", {d, 4 * d}, ParamKind::kMatrix);
  }
  add("ln_f.weight", {d}, ParamKind::kGain);
  add("ln_f.bias", {d}, ParamKind::kBias);
  add("lm_head.weight", {V, d}, ParamKind::kHead);
  size_t offset = 0;
  for (ParamInfo& p : layout) {
    p.offset = offset;
    offset += p.numel;
  }
  return layout;
}

size_t TotalParams(const ParamLayout& layout) {
  return layout.empty() ? 0 : layout.back().offset + layout.back().numel;
}

std::vector<TensorShape> CodecShapes(const ParamLayout& layout) {
  std::vector<TensorShape> out;
  for (const ParamInfo& p : layout) {
    out.push_back(TensorShape{static_cast<uint32_t>(p.shape[0]), p.numel, p.shape.size() == 1});
  }
  return out;
}

std::vector<float> InitParams(const v1::ModelSpec& spec, const ParamLayout& layout) {
  std::vector<float> params(TotalParams(layout));
  std::mt19937_64 rng(spec.init_seed());
  const float residual_std = 0.02f / std::sqrt(2.0f * spec.n_layer());
  for (const ParamInfo& p : layout) {
    float* dst = params.data() + p.offset;
    if (p.kind == ParamKind::kGain || p.kind == ParamKind::kBias) {
      std::fill(dst, dst + p.numel, p.kind == ParamKind::kGain ? 1.0f : 0.0f);
      continue;
    }
    const bool residual = p.name.size() > 11 && p.name.compare(p.name.size() - 11, 11, "proj.weight") == 0;
    std::normal_distribution<float> normal(0.0f, residual ? residual_std : 0.02f);
    for (size_t i = 0; i < p.numel; ++i) dst[i] = normal(rng);
  }
  return params;
}

}  // namespace muloco
