// Gpt: embeddings, pre-LayerNorm blocks (causal self-attention + GELU MLP), final LayerNorm,
// untied LM head. Tensor indices follow GptLayout's order.
#include "worker/gpt.h"

#include <torch/version.h>

#include <cmath>
#include <cstring>

namespace muloco {
namespace F = torch::nn::functional;

namespace {
constexpr size_t kPerLayer = 8;  // tensors per block in GptLayout

// Causal attention over [B, heads, L, hd]: LibTorch's fused scaled_dot_product_attention
// where it has one (2.x: flash / memory-efficient kernels on a GPU), else the explicit
// matmul-softmax-matmul (LibTorch 1.13, and the CPU reference every test runs).
torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask, double scale) {
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#endif
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * scale;
  att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
  return torch::matmul(att, v);
}
}

Gpt::Gpt(const v1::ModelSpec& spec, torch::Device device) : spec_(spec), device_(device), layout_(GptLayout(spec)) {
  const auto on = torch::TensorOptions(torch::kFloat32).device(device);
  for (const ParamInfo& p : layout_) params_.push_back(torch::zeros(p.shape, on).requires_grad_(true));
  const int64_t T = spec.context();
  causal_mask_ = torch::ones({T, T}, torch::TensorOptions(torch::kBool).device(device)).triu(1);
}

torch::Tensor Gpt::Loss(const torch::Tensor& tokens) const {
  const int64_t B = tokens.size(0), L = tokens.size(1) - 1;
  const int64_t d = spec_.d_model(), nh = spec_.n_head(), hd = d / nh;
  torch::Tensor idx = tokens.slice(1, 0, L), targets = tokens.slice(1, 1, L + 1);
  torch::Tensor x = F::embedding(idx, P(0)) + P(1).slice(0, 0, L);
  const torch::Tensor mask = causal_mask_.slice(0, 0, L).slice(1, 0, L);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (uint32_t l = 0; l < spec_.n_layer(); ++l) {
    const size_t b = 2 + l * kPerLayer;
    torch::Tensor h = torch::layer_norm(x, {d}, P(b), P(b + 1));
    std::vector<torch::Tensor> qkv = torch::linear(h, P(b + 2)).split(d, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, L, nh, hd}).transpose(1, 2); };
    torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    torch::Tensor y = Attention(q, k, v, mask, scale).transpose(1, 2).contiguous().view({B, L, d});
    x = x + torch::linear(y, P(b + 3));
    h = torch::layer_norm(x, {d}, P(b + 4), P(b + 5));
    x = x + torch::linear(torch::gelu(torch::linear(h, P(b + 6))), P(b + 7));
  }
  const size_t f = 2 + spec_.n_layer() * kPerLayer;
  x = torch::layer_norm(x, {d}, P(f), P(f + 1));
  torch::Tensor logits = torch::linear(x, P(f + 2));
  return F::cross_entropy(logits.view({B * L, -1}), targets.reshape({B * L}));
}

void Gpt::LoadFlat(const float* flat) {
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

void Gpt::StoreFlat(float* flat) const {
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

void Gpt::LoadFlat(const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t off = static_cast<int64_t>(layout_[i].offset);
    params_[i].copy_(flat.slice(0, off, off + static_cast<int64_t>(layout_[i].numel)).view(layout_[i].shape));
  }
}

void Gpt::StoreFlat(torch::Tensor& flat) const {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t off = static_cast<int64_t>(layout_[i].offset);
    flat.slice(0, off, off + static_cast<int64_t>(layout_[i].numel)).view(layout_[i].shape).copy_(params_[i]);
  }
}

}  // namespace muloco
