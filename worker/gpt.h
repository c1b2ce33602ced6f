// Decoder-only GPT in LibTorch, written functionally over the tensors of a ParamLayout so
// that the flat parameter buffer the server holds maps one to one onto the model.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "common/model_layout.h"

namespace muloco {

class Gpt {
 public:
  // REQUIRES: ValidateModelSpec(spec).ok(). Parameters start at zero: load them. They and
  // every activation live on `device`.
  explicit Gpt(const v1::ModelSpec& spec, torch::Device device = torch::kCPU);

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

 private:
  const torch::Tensor& P(size_t i) const { return params_[i]; }

  v1::ModelSpec spec_;
  torch::Device device_;
  ParamLayout layout_;
  std::vector<torch::Tensor> params_;  // leaf tensors, requires_grad, in layout order
  torch::Tensor causal_mask_;          // [context, context] bool, true above the diagonal
};

}  // namespace muloco
