// Trainer: Gpt + inner optimizers. AdamW (decay on matrices and embeddings, none on gains and
// biases) for everything, or Muon for the hidden matrices and AdamW for the rest; warmup +
// cosine schedule on both learning rates; gradient-norm clipping.
#include "worker/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/run_config.h"
#include "worker/gpt.h"
#include "worker/muon.h"

namespace muloco {

struct Trainer::Impl {
  Impl(const v1::RunConfig& c, const Corpus* corpus, uint64_t seed)
      : config(c), corpus(corpus), model(c.model()), rng(seed) {
    const RunKinds kinds = KindsOf(c);
    const bool use_muon = kinds.inner == InnerOptimizer::kMuon;
    std::vector<torch::Tensor> matrices, decay, no_decay;
    for (size_t i = 0; i < model.layout().size(); ++i) {
      const ParamKind kind = model.layout()[i].kind;
      const torch::Tensor& p = model.params()[i];
      if (use_muon && UsesMuon(kind)) {
        matrices.push_back(p);
        muon_names.push_back(model.layout()[i].name);
      } else {
        (Decays(kind) ? decay : no_decay).push_back(p);
        adam_params.push_back(p);
      }
    }
    auto options = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(c.inner_lr())
                                                              .betas({c.beta1(), c.beta2()})
                                                              .eps(c.adam_eps())
                                                              .weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, options(c.weight_decay()));
    groups.emplace_back(no_decay, options(0.0));
    adamw = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.inner_lr()));
    if (use_muon) {
      MuonOptions mo;
      mo.momentum = c.muon_momentum();
      mo.nesterov = kinds.mode != RunMode::kSignMuon;  // SignMuon orthogonalises the momentum EMA itself
      mo.ns_steps = static_cast<int>(c.ns_steps());
      mo.scale = kinds.muon_scale;
      mo.weight_decay = c.muon_weight_decay();
      muon = std::make_unique<Muon>(matrices, mo);
    }
    // Fixed validation windows, the same on every worker.
    std::mt19937_64 eval_rng(0x76616c);
    const size_t window = c.model().context();
    for (uint32_t i = 0; i < c.eval_batches(); ++i) {
      SampleWindows(corpus->val, c.batch_size(), window, eval_rng, scratch);
      eval_batches.push_back(Batch(scratch));
    }
  }

  torch::Tensor Batch(const std::vector<int64_t>& tokens) const {
    return torch::tensor(tokens, torch::kInt64).view({static_cast<int64_t>(config.batch_size()), -1});
  }

  // Forward and backward on a fresh batch (gradients clipped); returns the loss.
  double Gradients(const std::vector<int64_t>& tokens) {
    for (torch::Tensor& p : model.params()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss = model.Loss(Batch(tokens));
    loss.backward();
    if (config.grad_clip() > 0) torch::nn::utils::clip_grad_norm_(model.params(), config.grad_clip());
    return loss.item<double>();
  }

  const v1::RunConfig config;
  const Corpus* corpus;
  Gpt model;
  std::unique_ptr<torch::optim::AdamW> adamw;  // everything Muon does not take
  std::unique_ptr<Muon> muon;                  // hidden matrices, when inner_optimizer is muon
  std::vector<std::string> muon_names;
  std::vector<torch::Tensor> adam_params;
  std::vector<torch::Tensor> sign_m, sign_v;   // SignMuon: Adam moments of non-matrix tensors
  uint64_t sign_steps = 0;
  std::mt19937_64 rng;
  std::vector<int64_t> scratch;
  std::vector<torch::Tensor> eval_batches;
};

Trainer::Trainer(const v1::RunConfig& config, const Corpus* corpus, uint64_t seed)
    : impl_(std::make_unique<Impl>(config, corpus, seed)) {}
Trainer::~Trainer() = default;

size_t Trainer::num_params() const { return impl_->model.num_params(); }
void Trainer::SetParams(const float* flat) { impl_->model.LoadFlat(flat); }
void Trainer::GetParams(float* flat) const { impl_->model.StoreFlat(flat); }

double Trainer::InnerStep(uint64_t step) {
  Impl& m = *impl_;
  SampleWindows(m.corpus->train, m.config.batch_size(), m.config.model().context(), m.rng, m.scratch);
  return InnerStepOn(m.scratch, step);
}

double Trainer::InnerStepOn(const std::vector<int64_t>& tokens, uint64_t step) {
  Impl& m = *impl_;
  const double factor = LearningRateFactor(m.config, step);
  for (torch::optim::OptimizerParamGroup& g : m.adamw->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(g.options()).lr(m.config.inner_lr() * factor);
  }
  const double loss = m.Gradients(tokens);
  m.adamw->step();
  if (m.muon) m.muon->Step(m.config.muon_lr() * factor);
  return loss;
}

double Trainer::SignDirection(const float* global, float* direction) {
  Impl& m = *impl_;
  SetParams(global);
  SampleWindows(m.corpus->train, m.config.batch_size(), m.config.model().context(), m.rng, m.scratch);
  const double loss = m.Gradients(m.scratch);
  torch::NoGradGuard no_grad;
  const double b1 = m.config.beta1(), b2 = m.config.beta2();
  ++m.sign_steps;
  size_t muon_i = 0, adam_i = 0;
  for (size_t i = 0; i < m.model.params().size(); ++i) {
    const ParamInfo& info = m.model.layout()[i];
    torch::Tensor dir;
    if (m.muon && UsesMuon(info.kind)) {
      dir = m.muon->Direction(muon_i++);
    } else {
      // Adam's direction m_hat / (sqrt(v_hat) + eps): its sign is what the worker votes.
      const torch::Tensor& g = m.model.params()[i].grad();
      if (m.sign_m.size() <= adam_i) {
        m.sign_m.push_back(torch::zeros_like(g));
        m.sign_v.push_back(torch::zeros_like(g));
      }
      m.sign_m[adam_i].mul_(b1).add_(g, 1 - b1);
      m.sign_v[adam_i].mul_(b2).addcmul_(g, g, 1 - b2);
      const torch::Tensor m_hat = m.sign_m[adam_i] / (1 - std::pow(b1, m.sign_steps));
      const torch::Tensor v_hat = m.sign_v[adam_i] / (1 - std::pow(b2, m.sign_steps));
      dir = m_hat / (v_hat.sqrt() + m.config.adam_eps());
      ++adam_i;
    }
    torch::Tensor flat = dir.contiguous().to(torch::kFloat32);
    std::memcpy(direction + info.offset, flat.data_ptr<float>(), info.numel * sizeof(float));
  }
  return loss;
}

std::vector<std::string> Trainer::MuonTensorNames() const { return impl_->muon_names; }

double Trainer::TrainSteps(uint64_t first_step, const StepCallback& after_step) {
  double loss_sum = 0;
  uint32_t steps = 0;
  while (steps < impl_->config.inner_steps()) {
    loss_sum += InnerStep(first_step + steps);
    ++steps;
    if (after_step && !after_step(steps)) break;
  }
  return loss_sum / steps;
}

double Trainer::TrainRound(const float* global, uint64_t first_step, float* delta, const StepCallback& after_step) {
  const size_t n = num_params();
  SetParams(global);
  const double loss = TrainSteps(first_step, after_step);
  GetParams(delta);
  for (size_t i = 0; i < n; ++i) delta[i] = global[i] - delta[i];
  return loss;
}

double Trainer::Evaluate(const float* flat) {
  Impl& m = *impl_;
  std::vector<float> saved(num_params());
  GetParams(saved.data());
  SetParams(flat);
  double sum = 0;
  {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& batch : m.eval_batches) sum += m.model.Loss(batch).item<double>();
  }
  SetParams(saved.data());
  return m.eval_batches.empty() ? 0.0 : sum / m.eval_batches.size();
}

}  // namespace muloco
