// Layouts: the built-in GPT's and LLaMA's, the Muon rule, checks, differences, the wire form (see model_layout.h).
#include "common/model_layout.h"

#include <cmath>
#include <map>
#include <random>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"

namespace muloco {

absl::Status ValidateModelSpec(const v1::ModelSpec& s) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("model spec: " + m); };
  if (s.vocab_size() < 2 || s.vocab_size() > 65536) return bad("vocab_size must be in [2, 65536]");
  if (s.n_layer() < 1 || s.n_layer() > 256) return bad("n_layer must be in [1, 256]");
  if (s.n_head() < 1 || s.d_model() < 1 || s.d_model() > 16384) return bad("d_model must be in [1, 16384]");
  if (s.d_model() % s.n_head() != 0) return bad("d_model must be divisible by n_head");
  if (s.context() < 1 || s.context() > 65536) return bad("context must be in [1, 65536]");
  if (!s.arch().empty() && s.arch() != "gpt" && s.arch() != "llama") return bad("arch must be gpt or llama");
  if (!IsLlama(s)) {
    if (s.n_kv_head() != 0 || s.ffn_dim() != 0 || s.tie_embeddings()) {
      return bad("n_kv_head, ffn_dim and tie_embeddings are llama's (--arch=llama)");
    }
    return absl::OkStatus();
  }
  if (s.n_kv_head() > s.n_head() || (s.n_kv_head() != 0 && s.n_head() % s.n_kv_head() != 0)) {
    return bad("n_kv_head must divide n_head");
  }
  if ((s.d_model() / s.n_head()) % 2 != 0) return bad("llama: the head width d_model / n_head must be even (rotary)");
  if (s.ffn_dim() > 65536) return bad("ffn_dim must be at most 65536");
  return absl::OkStatus();
}

bool IsLlama(const v1::ModelSpec& s) { return s.arch() == "llama"; }

uint32_t KvHeads(const v1::ModelSpec& s) { return s.n_kv_head() ? s.n_kv_head() : s.n_head(); }

uint32_t FfnDim(const v1::ModelSpec& s) { return s.ffn_dim() ? s.ffn_dim() : (8 * s.d_model() / 3 + 7) / 8 * 8; }

ParamLayout BuiltinLayout(const v1::ModelSpec& s) { return IsLlama(s) ? LlamaLayout(s) : GptLayout(s); }

ParamLayout GptLayout(const v1::ModelSpec& s) {
  const int64_t V = s.vocab_size(), T = s.context(), d = s.d_model();
  ParamLayout layout;
  auto add = [&](std::string name, std::vector<int64_t> shape) { layout.push_back(ParamInfo{std::move(name), std::move(shape)}); };
  add("wte", {V, d});
  add("wpe", {T, d});
  for (uint32_t i = 0; i < s.n_layer(); ++i) {
    const std::string h = absl::StrCat("h.", i, ".");
    add(h + "ln1.weight", {d});
    add(h + "ln1.bias", {d});
    add(h + "attn.qkv.weight", {3 * d, d});
    add(h + "attn.proj.weight", {d, d});
    add(h + "ln2.weight", {d});
    add(h + "ln2.bias", {d});
    add(h + "mlp.fc.weight", {4 * d, d});
    add(h + "mlp.proj.weight", {d, 4 * d});
  }
  add("ln_f.weight", {d});
  add("ln_f.bias", {d});
  add("lm_head.weight", {V, d});
  PlaceTensors(&layout);
  AssignGroups(kDefaultAdamwParams, &layout).IgnoreError();  // the default rule parses
  return layout;
}

ParamLayout LlamaLayout(const v1::ModelSpec& s) {
  const int64_t V = s.vocab_size(), d = s.d_model(), kv = KvHeads(s) * (d / s.n_head()), f = FfnDim(s);
  ParamLayout layout;
  auto add = [&](std::string name, std::vector<int64_t> shape) { layout.push_back(ParamInfo{std::move(name), std::move(shape)}); };
  add("model.embed_tokens.weight", {V, d});
  for (uint32_t i = 0; i < s.n_layer(); ++i) {
    const std::string l = absl::StrCat("model.layers.", i, ".");
    add(l + "input_layernorm.weight", {d});
    add(l + "self_attn.q_proj.weight", {d, d});
    add(l + "self_attn.k_proj.weight", {kv, d});
    add(l + "self_attn.v_proj.weight", {kv, d});
    add(l + "self_attn.o_proj.weight", {d, d});
    add(l + "post_attention_layernorm.weight", {d});
    add(l + "mlp.gate_proj.weight", {f, d});
    add(l + "mlp.up_proj.weight", {f, d});
    add(l + "mlp.down_proj.weight", {d, f});
  }
  add("model.norm.weight", {d});
  if (!s.tie_embeddings()) add("lm_head.weight", {V, d});
  PlaceTensors(&layout);
  AssignGroups(kDefaultAdamwParams, &layout).IgnoreError();  // the default rule parses
  return layout;
}

void PlaceTensors(ParamLayout* layout) {
  size_t offset = 0;
  for (ParamInfo& p : *layout) {
    p.numel = 1;
    for (int64_t dim : p.shape) p.numel *= static_cast<size_t>(std::max<int64_t>(dim, 0));
    p.offset = offset;
    offset += p.numel;
  }
}

absl::Status AssignGroups(const std::string& adamw_params, ParamLayout* layout) {
  std::regex rule;
  try {
    rule = std::regex(adamw_params, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("--adamw_params: not a regular expression: ", e.what()));
  }
  for (ParamInfo& p : *layout) {
    if (p.shape.size() <= 1) {
      p.group = ParamGroup::kAdamWNoDecay;
    } else {
      p.group = p.shape.size() == 2 && !std::regex_search(p.name, rule) ? ParamGroup::kMuon : ParamGroup::kAdamW;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLayout(const ParamLayout& layout) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("model layout: " + m); };
  if (layout.empty()) return bad("no tensors");
  if (layout.size() > 100000) return bad("more than 100000 tensors");
  std::map<std::string, size_t> seen;
  uint64_t total = 0;
  for (const ParamInfo& p : layout) {
    if (p.name.empty() || p.name.size() > 256) return bad("a tensor name is empty or longer than 256 characters");
    for (char c : p.name) {
      if (c < 0x21 || c > 0x7e) return bad(absl::StrCat("tensor name \"", p.name, "\" is not printable ASCII"));
    }
    if (!seen.emplace(p.name, 0).second) return bad(absl::StrCat("tensor ", p.name, " appears twice"));
    if (p.shape.size() > 8) return bad(absl::StrCat("tensor ", p.name, " has more than 8 dimensions"));
    uint64_t numel = 1;
    for (int64_t dim : p.shape) {
      if (dim < 1 || dim >= (int64_t{1} << 31)) return bad(absl::StrCat("tensor ", p.name, " has a dimension outside [1, 2^31)"));
      numel *= static_cast<uint64_t>(dim);
      if (numel > (uint64_t{1} << 36)) return bad(absl::StrCat("tensor ", p.name, " is too large"));
    }
    total += numel;
    if (total > (uint64_t{1} << 36)) return bad("more than 2^36 parameters");
  }
  return absl::OkStatus();
}

namespace {

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

}  // namespace

std::string LayoutDifference(const ParamLayout& want, const ParamLayout& have) {
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : have) by_name[p.name] = &p;
  for (const ParamInfo& w : want) {
    auto it = by_name.find(w.name);
    if (it == by_name.end()) return absl::StrCat("tensor ", w.name, " ", ShapeText(w.shape), " of the run is missing here");
    if (it->second->shape != w.shape) {
      return absl::StrCat("tensor ", w.name, ": shape ", ShapeText(it->second->shape), " here, ", ShapeText(w.shape),
                          " in the run");
    }
    by_name.erase(it);
  }
  if (!by_name.empty()) return absl::StrCat("tensor ", by_name.begin()->first, " is not in the run's model");
  return "";
}

v1::ModelLayout LayoutProto(const ParamLayout& layout) {
  v1::ModelLayout out;
  for (const ParamInfo& p : layout) {
    v1::TensorSpec* t = out.add_tensors();
    t->set_name(p.name);
    for (int64_t d : p.shape) t->add_shape(d);
    t->set_group(p.group == ParamGroup::kMuon     ? v1::TENSOR_GROUP_MUON
                 : p.group == ParamGroup::kAdamW ? v1::TENSOR_GROUP_ADAMW
                                                 : v1::TENSOR_GROUP_ADAMW_NO_DECAY);
  }
  return out;
}

absl::StatusOr<ParamLayout> LayoutFromProto(const v1::ModelLayout& proto) {
  ParamLayout layout;
  for (const v1::TensorSpec& t : proto.tensors()) {
    ParamGroup g = ParamGroup::kAdamW;
    if (t.group() == v1::TENSOR_GROUP_MUON) g = ParamGroup::kMuon;
    else if (t.group() == v1::TENSOR_GROUP_ADAMW_NO_DECAY) g = ParamGroup::kAdamWNoDecay;
    else if (t.group() != v1::TENSOR_GROUP_ADAMW) return absl::InvalidArgumentError("model layout: unknown tensor group");
    layout.push_back(ParamInfo{t.name(), {t.shape().begin(), t.shape().end()}, g});
  }
  PlaceTensors(&layout);
  if (absl::Status s = ValidateLayout(layout); !s.ok()) return s;
  return layout;
}

size_t TotalParams(const ParamLayout& layout) {
  return layout.empty() ? 0 : layout.back().offset + layout.back().numel;
}

std::vector<TensorShape> CodecShapes(const ParamLayout& layout) {
  std::vector<TensorShape> out;
  for (const ParamInfo& p : layout) {
    out.push_back(TensorShape{static_cast<uint32_t>(p.shape.empty() ? 1 : p.shape[0]), p.numel, p.shape.size() <= 1});
  }
  return out;
}

std::vector<float> InitParams(const v1::ModelSpec& spec, const ParamLayout& layout) {
  std::vector<float> params(TotalParams(layout));
  std::mt19937_64 rng(spec.init_seed());
  const float residual_std = 0.02f / std::sqrt(2.0f * spec.n_layer());
  for (const ParamInfo& p : layout) {
    float* dst = params.data() + p.offset;
    if (p.shape.size() == 1) {  // LayerNorm: gains 1, biases 0
      const bool bias = p.name.size() > 4 && p.name.compare(p.name.size() - 4, 4, "bias") == 0;
      std::fill(dst, dst + p.numel, bias ? 0.0f : 1.0f);
      continue;
    }
    const bool residual = absl::EndsWith(p.name, ".proj.weight") || absl::EndsWith(p.name, "o_proj.weight") ||
                          absl::EndsWith(p.name, "down_proj.weight");  // GPT's proj, LLaMA's o_proj and down_proj
    std::normal_distribution<float> normal(0.0f, residual ? residual_std : 0.02f);
    for (size_t i = 0; i < p.numel; ++i) dst[i] = normal(rng);
  }
  return params;
}

}  // namespace muloco
