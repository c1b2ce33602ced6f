// Llama (see language_model.h). Tensor indices follow LlamaLayout's order.
#include "worker/language_model.h"

#include <cmath>

namespace muloco {
namespace F = torch::nn::functional;

namespace {

constexpr size_t kPerLayer = 9;  // tensors per block in LlamaLayout

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + kLlamaRmsEps) * weight;
}

}  // namespace

Llama::Llama(const v1::ModelSpec& spec, torch::Device device) : LanguageModel(spec, LlamaLayout(spec), device) {
  const int64_t T = spec.context(), hd = spec.d_model() / spec.n_head();
  const torch::Tensor inv_freq =
      torch::pow(kLlamaRopeBase, -torch::arange(0, hd, 2, torch::kFloat64) / static_cast<double>(hd));
  const torch::Tensor angles = torch::outer(torch::arange(T, torch::kFloat64), inv_freq);  // [T, hd/2]
  const torch::Tensor both = torch::cat({angles, angles}, -1).to(torch::kFloat32);
  cos_ = both.cos().to(device);
  sin_ = both.sin().to(device);
}

torch::Tensor Llama::Rotate(const torch::Tensor& x, int64_t L) const {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos_.slice(0, 0, L) + rotated * sin_.slice(0, 0, L);
}

torch::Tensor Llama::Logits(const torch::Tensor& idx) const {
  const int64_t B = idx.size(0), L = idx.size(1);
  const int64_t d = spec_.d_model(), nh = spec_.n_head(), nkv = KvHeads(spec_), hd = d / nh;
  torch::Tensor x = F::embedding(idx, P(0));
  const torch::Tensor mask = CausalMask(L);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  auto heads = [&](const torch::Tensor& t, int64_t n) { return t.view({B, L, n, hd}).transpose(1, 2); };
  for (uint32_t l = 0; l < spec_.n_layer(); ++l) {
    const size_t b = 1 + l * kPerLayer;
    torch::Tensor h = RmsNorm(x, P(b));
    torch::Tensor q = Rotate(heads(torch::linear(h, P(b + 1)), nh), L);
    torch::Tensor k = Rotate(heads(torch::linear(h, P(b + 2)), nkv), L);
    torch::Tensor v = heads(torch::linear(h, P(b + 3)), nkv);
    if (nkv < nh) {  // each key/value head serves nh / nkv consecutive query heads
      k = k.repeat_interleave(nh / nkv, 1);
      v = v.repeat_interleave(nh / nkv, 1);
    }
    torch::Tensor y = CausalAttention(q, k, v, mask, scale).transpose(1, 2).contiguous().view({B, L, d});
    x = x + torch::linear(y, P(b + 4));
    h = RmsNorm(x, P(b + 5));
    x = x + torch::linear(torch::silu(torch::linear(h, P(b + 6))) * torch::linear(h, P(b + 7)), P(b + 8));
  }
  const size_t f = 1 + spec_.n_layer() * kPerLayer;
  x = RmsNorm(x, P(f));
  return torch::linear(x, spec_.tie_embeddings() ? P(0) : P(f + 1));
}

}  // namespace muloco
