// TorchModelWorker (see torch_model_worker.h).
#include "worker/torch_model_worker.h"

#include <torch/torch.h>

#include <map>

#include "absl/strings/str_cat.h"

namespace muloco {
namespace {

ParamLayout LayoutOf(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  ParamLayout l;
  for (const auto& [name, t] : params) l.push_back(ParamInfo{name, t.sizes().vec()});
  return l;
}

}  // namespace

TorchModelWorker::TorchModelWorker(WorkerOptions o, Transport* transport, std::string token,
                                   std::vector<std::pair<std::string, torch::Tensor>> params)
    : params_(std::move(params)), worker_(std::move(o), transport, std::move(token), LayoutOf(params_)) {}

template <typename F>
auto TorchModelWorker::OnHost(F call) -> decltype(call(std::declval<const ModelWorker::Tensors&>())) {
  torch::NoGradGuard no_grad;
  ModelWorker::Tensors ptrs;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> staged;  // (parameter, host copy)
  for (const torch::Tensor& p : ordered_) {
    if (p.device().is_cpu() && p.scalar_type() == torch::kFloat32 && p.is_contiguous()) {
      ptrs.push_back(p.data_ptr<float>());
    } else {
      torch::Tensor host = p.detach().to(torch::kCPU, torch::kFloat32).contiguous();
      ptrs.push_back(host.data_ptr<float>());
      staged.emplace_back(p, host);
    }
  }
  auto out = call(ptrs);
  for (auto& [p, host] : staged) p.copy_(host);
  return out;
}

absl::Status TorchModelWorker::Join() {
  if (absl::Status s = worker_.Join(); !s.ok()) return s;
  std::map<std::string, torch::Tensor> by_name(params_.begin(), params_.end());
  ordered_.clear();
  for (const ParamInfo& p : worker_.layout()) ordered_.push_back(by_name.at(p.name));  // Join checked the names
  return OnHost([&](const ModelWorker::Tensors& t) { return worker_.ReadModel(t); });
}

absl::StatusOr<SyncResult> TorchModelWorker::Sync(const SyncReport& r) {
  return OnHost([&](const ModelWorker::Tensors& t) { return worker_.Sync(t, r); });
}

absl::StatusOr<bool> TorchModelWorker::AfterStep() {
  if (!worker_.LandDue()) return false;
  absl::StatusOr<bool> landed = OnHost([&](const ModelWorker::Tensors& t) { return worker_.Land(t); });
  if (!landed.ok()) return landed.status();
  return true;
}

void TorchModelWorker::Leave() {
  if (ordered_.empty() || !worker_.in_flight()) {
    worker_.Leave();
    return;
  }
  OnHost([&](const ModelWorker::Tensors& t) {
    worker_.Leave(&t);
    return 0;
  });
}

}  // namespace muloco
