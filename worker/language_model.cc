// LanguageModel: the flat-buffer copies, attention and the choice of architecture (see
// language_model.h).
#include "worker/language_model.h"

#include <torch/version.h>

#include <cstring>
#include <limits>


namespace muloco {

LanguageModel::LanguageModel(const v1::ModelSpec& spec, ParamLayout layout, torch::Device device)
    : spec_(spec), device_(device), layout_(std::move(layout)) {
  const auto on = torch::TensorOptions(torch::kFloat32).device(device);
  for (const ParamInfo& p : layout_) params_.push_back(torch::zeros(p.shape, on).requires_grad_(true));
  const int64_t T = spec.context();
  causal_mask_ = torch::ones({T, T}, torch::TensorOptions(torch::kBool).device(device)).triu(1);
}

torch::Tensor LanguageModel::Loss(const torch::Tensor& tokens) const {
  const int64_t B = tokens.size(0), L = tokens.size(1) - 1;
  const torch::Tensor logits = Logits(tokens.slice(1, 0, L));
  return torch::nn::functional::cross_entropy(logits.reshape({B * L, -1}), tokens.slice(1, 1, L + 1).reshape({B * L}));
}

std::unique_ptr<LanguageModel> MakeLanguageModel(const v1::ModelSpec& spec, torch::Device device) {
  if (IsLlama(spec)) return std::make_unique<Llama>(spec, device);
  return std::make_unique<Gpt>(spec, device);
}

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask, double scale) {
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#endif
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * scale;
  att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
  return torch::matmul(att, v);
}

void LanguageModel::LoadFlat(const float* flat) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    float* src = const_cast<float*>(flat + layout_[i].offset);
    if (params_[i].is_cpu()) {
      std::memcpy(params_[i].data_ptr<float>(), src, layout_[i].numel * sizeof(float));
    } else {
      params_[i].copy_(torch::from_blob(src, layout_[i].shape, torch::kFloat32));
    }
  }
}

void LanguageModel::StoreFlat(float* flat) const {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].is_cpu()) {
      torch::Tensor t = params_[i].contiguous();
      std::memcpy(flat + layout_[i].offset, t.data_ptr<float>(), layout_[i].numel * sizeof(float));
    } else {
      torch::from_blob(flat + layout_[i].offset, layout_[i].shape, torch::kFloat32).copy_(params_[i]);
    }
  }
}

void LanguageModel::LoadFlat(const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t off = static_cast<int64_t>(layout_[i].offset);
    params_[i].copy_(flat.slice(0, off, off + static_cast<int64_t>(layout_[i].numel)).view(layout_[i].shape));
  }
}

void LanguageModel::StoreFlat(torch::Tensor& flat) const {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t off = static_cast<int64_t>(layout_[i].offset);
    flat.slice(0, off, off + static_cast<int64_t>(layout_[i].numel)).view(layout_[i].shape).copy_(params_[i]);
  }
}

}  // namespace muloco
