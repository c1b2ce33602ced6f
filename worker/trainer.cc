// Trainer: Gpt + torch::optim::AdamW (decay on matrices and embeddings, none on gains and
// biases), warmup + cosine schedule, gradient-norm clipping.
#include "worker/trainer.h"

#include <torch/torch.h>

#include <vector>

#include "common/run_config.h"
#include "worker/gpt.h"

namespace muloco {

struct Trainer::Impl {
  Impl(const v1::RunConfig& c, const Corpus* corpus, uint64_t seed)
      : config(c), corpus(corpus), model(c.model()), rng(seed) {
    std::vector<torch::Tensor> decay, no_decay;
    for (size_t i = 0; i < model.layout().size(); ++i) {
      const ParamKind kind = model.layout()[i].kind;
      (kind == ParamKind::kGain || kind == ParamKind::kBias ? no_decay : decay).push_back(model.params()[i]);
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
    optimizer = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.inner_lr()));
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

  const v1::RunConfig config;
  const Corpus* corpus;
  Gpt model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
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
  const double lr = InnerLearningRate(m.config, step);
  for (torch::optim::OptimizerParamGroup& g : m.optimizer->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  }
  m.optimizer->zero_grad();
  torch::Tensor loss = m.model.Loss(m.Batch(tokens));
  loss.backward();
  if (m.config.grad_clip() > 0) torch::nn::utils::clip_grad_norm_(m.model.params(), m.config.grad_clip());
  m.optimizer->step();
  return loss.item<double>();
}

double Trainer::TrainRound(const float* global, uint64_t first_step, float* delta) {
  const size_t n = num_params();
  SetParams(global);
  double loss_sum = 0;
  for (uint32_t h = 0; h < impl_->config.inner_steps(); ++h) loss_sum += InnerStep(first_step + h);
  GetParams(delta);
  for (size_t i = 0; i < n; ++i) delta[i] = global[i] - delta[i];
  return loss_sum / impl_->config.inner_steps();
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
