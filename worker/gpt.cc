// Gpt (see language_model.h). Tensor indices follow GptLayout's order.
#include "worker/language_model.h"

#include <cmath>

namespace muloco {
namespace F = torch::nn::functional;

namespace {
constexpr size_t kPerLayer = 8;  // tensors per block in GptLayout
}  // namespace

Gpt::Gpt(const v1::ModelSpec& spec, torch::Device device) : LanguageModel(spec, GptLayout(spec), device) {}

torch::Tensor Gpt::Logits(const torch::Tensor& idx) const {
  const int64_t B = idx.size(0), L = idx.size(1);
  const int64_t d = spec_.d_model(), nh = spec_.n_head(), hd = d / nh;
  torch::Tensor x = F::embedding(idx, P(0)) + P(1).slice(0, 0, L);
  const torch::Tensor mask = CausalMask(L);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (uint32_t l = 0; l < spec_.n_layer(); ++l) {
    const size_t b = 2 + l * kPerLayer;
    torch::Tensor h = torch::layer_norm(x, {d}, P(b), P(b + 1));
    std::vector<torch::Tensor> qkv = torch::linear(h, P(b + 2)).split(d, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, L, nh, hd}).transpose(1, 2); };
    torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    torch::Tensor y = CausalAttention(q, k, v, mask, scale).transpose(1, 2).contiguous().view({B, L, d});
    x = x + torch::linear(y, P(b + 3));
    h = torch::layer_norm(x, {d}, P(b + 4), P(b + 5));
    x = x + torch::linear(torch::gelu(torch::linear(h, P(b + 6))), P(b + 7));
  }
  const size_t f = 2 + spec_.n_layer() * kPerLayer;
  x = torch::layer_norm(x, {d}, P(f), P(f + 1));
  return torch::linear(x, P(f + 2));
}

}  // namespace muloco
