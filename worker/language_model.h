// The worker's built-in language models behind one interface: functional LibTorch models
// over the tensors of a ParamLayout, so that the flat parameter buffer the server holds maps
// one to one onto the model. Gpt (worker/gpt.cc) and Llama (worker/llama.cc); MakeLanguageModel
// picks one by the spec's arch.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/model_layout.h"

namespace muloco {

class LanguageModel {
 public:
  // Parameters start at zero: load them. They and every activation live on `device`.
  LanguageModel(const v1::ModelSpec& spec, ParamLayout layout, torch::Device device);
  virtual ~LanguageModel() = default;

  // Next-token logits [B, L, vocab] of int64 inputs [B, L], L <= context.
  virtual torch::Tensor Logits(const torch::Tensor& idx) const = 0;
  // Mean next-token cross-entropy. tokens: int64 [B, L+1] with L <= context; inputs are
  // tokens[:, :-1], targets tokens[:, 1:].
  torch::Tensor Loss(const torch::Tensor& tokens) const;

  // Copies between the model and a flat fp32 buffer in layout order (TotalParams floats),
  // in host memory.
  void LoadFlat(const float* flat);
  void StoreFlat(float* flat) const;
  // The same with a flat fp32 tensor on the model's device.
  void LoadFlat(const torch::Tensor& flat);
  void StoreFlat(torch::Tensor& flat) const;
  torch::Device device() const { return device_; }

  std::vector<torch::Tensor>& params() { return params_; }
  const ParamLayout& layout() const { return layout_; }
  size_t num_params() const { return TotalParams(layout_); }

 protected:
  const torch::Tensor& P(size_t i) const { return params_[i]; }
  // [L, L] bool, true above the diagonal: the causal mask of L <= context positions.
  torch::Tensor CausalMask(int64_t L) const { return causal_mask_.slice(0, 0, L).slice(1, 0, L); }

  const v1::ModelSpec spec_;
  torch::Device device_;
  ParamLayout layout_;
  std::vector<torch::Tensor> params_;  // leaf tensors, requires_grad, in layout order
  torch::Tensor causal_mask_;          // [context, context]
};

// REQUIRES: ValidateModelSpec(spec).ok().
std::unique_ptr<LanguageModel> MakeLanguageModel(const v1::ModelSpec& spec, torch::Device device = torch::kCPU);

// Decoder-only GPT-2 style model (GptLayout): embeddings, pre-LayerNorm blocks (causal
// self-attention + GELU MLP), final LayerNorm, untied LM head.
class Gpt : public LanguageModel {
 public:
  explicit Gpt(const v1::ModelSpec& spec, torch::Device device = torch::kCPU);
  torch::Tensor Logits(const torch::Tensor& idx) const override;
};

// LLaMA-style decoder (LlamaLayout, Hugging Face names and conventions, so an export loads
// into transformers' LlamaForCausalLM by name): RMSNorm (eps kLlamaRmsEps) before attention
// and MLP, rotary position embeddings on queries and keys (base kLlamaRopeBase, the
// rotate-half pairing of Hugging Face's checkpoints), grouped-query attention when n_kv_head
// < n_head, SwiGLU MLP, final RMSNorm, LM head tied to the token embedding or not; no biases.
class Llama : public LanguageModel {
 public:
  explicit Llama(const v1::ModelSpec& spec, torch::Device device = torch::kCPU);  // REQUIRES: IsLlama(spec)
  torch::Tensor Logits(const torch::Tensor& idx) const override;

 private:
  // q or k [B, heads, L, hd] rotated by position.
  torch::Tensor Rotate(const torch::Tensor& x, int64_t L) const;

  torch::Tensor cos_, sin_;  // [context, head width]: each position's angles, the halves repeated
};

// Causal attention over [B, heads, L, hd]: LibTorch's fused scaled_dot_product_attention
// where it has one (2.x: flash / memory-efficient kernels on a GPU), else the explicit
// matmul-softmax-matmul (LibTorch 1.13, and the CPU reference every test runs). `mask`:
// [L, L] bool, true above the diagonal.
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask, double scale);

}  // namespace muloco
