// Muon (MomentUm Orthogonalized by Newton–Schulz) for 2-D hidden matrices, in LibTorch, on
// CPU or CUDA tensors. Following Keller Jordan's reference: momentum EMA with optional
// Nesterov look-ahead, quintic Newton–Schulz on the Frobenius-normalised update (transposed
// when rows > cols; bf16 on CUDA), shape scaling, decoupled weight decay.
#pragma once

#include <torch/torch.h>

#include <array>
#include <vector>

#include "common/run_config.h"  // MuonScale
#include "kernels/newton_schulz.h"

namespace muloco {

struct MuonOptions {
  double momentum = 0.95;  // EMA coefficient beta
  bool nesterov = true;    // update = lerp(grad, buf, beta) instead of buf
  int ns_steps = 5;
  std::array<double, 3> ns_coeffs = kernels::kNewtonSchulzCoeffs;
  MuonScale scale = MuonScale::kShape;
  double weight_decay = 0.0;  // decoupled: W *= 1 - lr * wd
};

// The quintic Newton–Schulz iteration: an approximate polar factor U V^T of g (2-D).
// Singular values of the result lie in about [0.5, 1.5] for those of g above ~1e-3 of its
// Frobenius norm (5 steps); smaller ones are amplified by ~a^steps. bf16 on CUDA; on the CPU
// the same function is computed from an fp64 eigendecomposition of the Gram matrix (the same
// iterates in exact arithmetic, 1.7-3.8x faster on Muon's shapes here; muon.cc), plain fp32 steps
// for a non-finite matrix or where that fails.
torch::Tensor NewtonSchulz(const torch::Tensor& g, int steps, const std::array<double, 3>& coeffs);


class Muon {
 public:
  // REQUIRES: every param is 2-D.
  Muon(std::vector<torch::Tensor> params, MuonOptions options);

  // One step at learning rate lr using each param's .grad().
  void Step(double lr);
  // The orthogonalised, scaled direction Muon would apply for params[i] (updates momentum).
  torch::Tensor Direction(size_t i);

  const std::vector<torch::Tensor>& params() const { return params_; }
  // Each param's momentum buffer (saved and restored with a worker's local state).
  std::vector<torch::Tensor>& momentum() { return momentum_; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> momentum_;
  MuonOptions options_;
};

}  // namespace muloco
