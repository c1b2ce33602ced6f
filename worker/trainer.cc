// Trainer: the built-in model (GPT or LLaMA) + inner optimizers. AdamW (decay on matrices and embeddings, none on gains and
// biases) for everything, or Muon for the hidden matrices and AdamW for the rest; warmup +
// cosine schedule on both learning rates; gradient-norm clipping.
#include "worker/trainer.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/run_config.h"
#include "worker/language_model.h"
#include "worker/muon.h"
#include "worker/torch_device.h"

namespace muloco {
namespace {

// Autocast of CUDA ops to bf16 while alive (LibTorch's API moved in 2.4); the cast weights
// are dropped when it ends, so the next step casts the updated fp32 weights afresh.
class Bf16Autocast {
 public:
  explicit Bf16Autocast(bool on) : on_(on) {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
#endif
  }
  ~Bf16Autocast() {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
    at::autocast::clear_cache();
  }

 private:
  const bool on_;
};

// A view of n host floats (no copy), for arithmetic with device tensors after .to(device).
torch::Tensor HostFlat(const float* p, size_t n) {
  return torch::from_blob(const_cast<float*>(p), {static_cast<int64_t>(n)}, torch::kFloat32);
}

}  // namespace

struct Trainer::Impl {
  Impl(const v1::RunConfig& c, const Corpus* corpus, uint64_t seed, const ComputeDevice& d, const ParamLayout* g)
      : config(c), corpus(corpus), device(d), model(MakeLanguageModel(c.model(), TorchDevice(d))), groups(g ? *g : model->layout()),
        rng(seed), delta(d, TotalParams(model->layout())) {
    const RunKinds kinds = KindsOf(c);
    const bool use_muon = kinds.inner == InnerOptimizer::kMuon;
    std::vector<torch::Tensor> matrices, decay, no_decay;
    for (size_t i = 0; i < model->layout().size(); ++i) {
      const ParamGroup group = groups[i].group;
      const torch::Tensor& p = model->params()[i];
      if (use_muon && UsesMuon(group)) {
        matrices.push_back(p);
        muon_names.push_back(model->layout()[i].name);
      } else {
        (Decays(group) ? decay : no_decay).push_back(p);
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
    return torch::tensor(tokens, torch::kInt64).view({static_cast<int64_t>(config.batch_size()), -1}).to(model->device());
  }

  // The parameters as one flat fp32 tensor on the device (a copy).
  torch::Tensor Flat() const {
    torch::Tensor flat = torch::empty({static_cast<int64_t>(model->num_params())},
                                      torch::TensorOptions(torch::kFloat32).device(model->device()));
    model->StoreFlat(flat);
    return flat;
  }
  // n floats of host memory, on the device (on the CPU: a view, valid while `p` is).
  torch::Tensor OnDevice(const float* p) const { return HostFlat(p, model->num_params()).to(model->device()); }

  // Forward and backward on a fresh batch (gradients clipped); returns the loss.
  double Gradients(const std::vector<int64_t>& tokens) {
    for (torch::Tensor& p : model->params()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss;
    {
      Bf16Autocast autocast(device.bf16);
      loss = model->Loss(Batch(tokens));
    }
    loss.backward();
    if (config.grad_clip() > 0) torch::nn::utils::clip_grad_norm_(model->params(), config.grad_clip());
    return loss.item<double>();
  }

  const v1::RunConfig config;
  const Corpus* corpus;
  const ComputeDevice device;
  std::unique_ptr<LanguageModel> model;
  const ParamLayout groups;  // the optimizer group of each of the model's tensors
  std::unique_ptr<torch::optim::AdamW> adamw;  // everything Muon does not take
  std::unique_ptr<Muon> muon;                  // hidden matrices, when inner_optimizer is muon
  std::vector<std::string> muon_names;
  std::vector<torch::Tensor> adam_params;
  std::vector<torch::Tensor> sign_m, sign_v;   // SignMuon: Adam moments of non-matrix tensors
  uint64_t sign_steps = 0;
  std::mt19937_64 rng;
  std::vector<int64_t> scratch;
  std::vector<torch::Tensor> eval_batches;
  DeviceFloats delta;   // the last round's pseudo-gradient or SignMuon direction
  torch::Tensor pushed;  // overlap: the parameters the round in flight was pushed from
};

Trainer::Trainer(const v1::RunConfig& config, const Corpus* corpus, uint64_t seed, const ComputeDevice& device,
                 const ParamLayout* groups)
    : impl_(std::make_unique<Impl>(config, corpus, seed, device, groups)) {}
Trainer::~Trainer() = default;

size_t Trainer::num_params() const { return impl_->model->num_params(); }
void Trainer::SetParams(const float* flat) { impl_->model->LoadFlat(flat); }
void Trainer::GetParams(float* flat) const { impl_->model->StoreFlat(flat); }

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

double Trainer::SignDirection(const float* global) {
  Impl& m = *impl_;
  SetParams(global);
  SampleWindows(m.corpus->train, m.config.batch_size(), m.config.model().context(), m.rng, m.scratch);
  const double loss = m.Gradients(m.scratch);
  torch::NoGradGuard no_grad;
  const double b1 = m.config.beta1(), b2 = m.config.beta2();
  ++m.sign_steps;
  size_t muon_i = 0, adam_i = 0;
  for (size_t i = 0; i < m.model->params().size(); ++i) {
    torch::Tensor dir;
    if (m.muon && UsesMuon(m.groups[i].group)) {
      dir = m.muon->Direction(muon_i++);
    } else {
      // Adam's direction m_hat / (sqrt(v_hat) + eps): its sign is what the worker votes.
      const torch::Tensor& g = m.model->params()[i].grad();
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
    const ParamInfo& info = m.model->layout()[i];
    TensorOf(m.delta).slice(0, info.offset, info.offset + info.numel).copy_(dir.reshape({-1}));
  }
  return loss;
}

std::vector<std::string> Trainer::MuonTensorNames() const { return impl_->muon_names; }

double Trainer::TrainSteps(uint64_t first_step, uint32_t wanted, const StepCallback& after_step) {
  double loss_sum = 0;
  uint32_t steps = 0;
  while (steps < std::max<uint32_t>(1, wanted)) {
    loss_sum += InnerStep(first_step + steps);
    ++steps;
    if (after_step && !after_step(steps)) break;
  }
  return loss_sum / steps;
}

DeviceFloats& Trainer::delta() { return impl_->delta; }

void Trainer::MarkPush() { impl_->pushed = impl_->Flat(); }

void Trainer::UnmarkPush() {
  torch::NoGradGuard no_grad;
  impl_->pushed.add_(TensorOf(impl_->delta));
}

std::string Trainer::SaveState(const float* base) const {
  const Impl& m = *impl_;
  torch::serialize::OutputArchive out;
  out.write("theta", m.Flat().cpu());
  out.write("base", base ? HostFlat(base, num_params()).clone() : m.pushed.cpu());
  torch::serialize::OutputArchive adamw;
  m.adamw->save(adamw);
  out.write("adamw", adamw);
  if (m.muon) {
    for (size_t i = 0; i < m.muon->momentum().size(); ++i) out.write("muon" + std::to_string(i), m.muon->momentum()[i].cpu());
  }
  std::ostringstream bytes;
  out.save_to(bytes);
  return bytes.str();
}

absl::Status Trainer::RestoreState(const std::string& bytes) {
  Impl& m = *impl_;
  const int64_t n = static_cast<int64_t>(num_params());
  try {
    std::istringstream in_bytes(bytes);
    torch::serialize::InputArchive in;
    in.load_from(in_bytes);
    torch::Tensor theta, base;
    in.read("theta", theta);
    in.read("base", base);
    if (theta.numel() != n || base.numel() != n || theta.scalar_type() != torch::kFloat32 ||
        base.scalar_type() != torch::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("it holds ", theta.numel(), " parameters, the model has ", n));
    }
    std::vector<torch::Tensor> momentum(m.muon ? m.muon->momentum().size() : 0);
    for (size_t i = 0; i < momentum.size(); ++i) {
      in.read("muon" + std::to_string(i), momentum[i]);
      if (!momentum[i].sizes().equals(m.muon->momentum()[i].sizes())) {
        return absl::InvalidArgumentError(absl::StrCat("Muon momentum ", i, " has another shape than the model's"));
      }
    }
    torch::NoGradGuard no_grad;
    torch::serialize::InputArchive adamw;
    in.read("adamw", adamw);
    m.adamw->load(adamw);
    for (size_t i = 0; i < momentum.size(); ++i) m.muon->momentum()[i].copy_(momentum[i]);
    m.model->LoadFlat(theta.to(m.model->device()));
    m.pushed = base.to(m.model->device());
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("not a saved training state of this model: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

void Trainer::Rebase(const float* pub) {
  torch::NoGradGuard no_grad;
  torch::Tensor theta = impl_->Flat();
  theta.add_(impl_->OnDevice(pub) - impl_->pushed);  // θ + (pub − θ_push)
  impl_->model->LoadFlat(theta);
}

void Trainer::DeltaFrom(const float* pub) {
  torch::NoGradGuard no_grad;
  torch::sub_out(TensorOf(impl_->delta), impl_->OnDevice(pub), impl_->Flat());
}

double Trainer::Evaluate(const float* flat) {
  Impl& m = *impl_;
  const torch::Tensor saved = m.Flat();
  SetParams(flat);
  double sum = 0;
  {
    torch::NoGradGuard no_grad;
    Bf16Autocast autocast(m.device.bf16);
    for (const torch::Tensor& batch : m.eval_batches) sum += m.model->Loss(batch).item<double>();
  }
  m.model->LoadFlat(saved);
  return m.eval_batches.empty() ? 0.0 : sum / m.eval_batches.size();
}

}  // namespace muloco
