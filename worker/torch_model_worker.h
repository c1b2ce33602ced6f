// A ModelWorker (worker/model_worker.h) over LibTorch tensors: a C++ training loop with a
// model of its own (any module's named parameters, on any device and dtype) joins a run
// and calls Sync once per outer step (AfterStep after each inner step, with overlap). CPU
// float32 contiguous tensors are handed to the core in place; the others go through a host
// float32 copy, written back after each call.
#pragma once

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model_worker.h"

namespace muloco {

class TorchModelWorker {
 public:
  // `params`: the model's parameters under their names (e.g. module.named_parameters()).
  TorchModelWorker(WorkerOptions o, Transport* transport, std::string token,
                   std::vector<std::pair<std::string, torch::Tensor>> params);

  // Joins (the server checks the model against the run's) and loads θ_pub into the tensors.
  absl::Status Join();
  // One outer step (ModelWorker::Sync), the tensors updated in place.
  absl::StatusOr<SyncResult> Sync(const SyncReport& r);
  // Overlap: after each inner step; lands the flight when it is due. Returns whether it landed.
  absl::StatusOr<bool> AfterStep();
  // Lands a flight still in the air, then leaves the run.
  void Leave();

  ModelWorker& core() { return worker_; }
  bool done() const { return worker_.done(); }
  uint64_t round() const { return worker_.round(); }

 private:
  // The tensors as the core's float pointers (staging the others), `call` on them, and the
  // staged ones written back.
  template <typename F>
  auto OnHost(F call) -> decltype(call(std::declval<const ModelWorker::Tensors&>()));

  std::vector<std::pair<std::string, torch::Tensor>> params_;
  ModelWorker worker_;
  std::vector<torch::Tensor> ordered_;  // params_ in the run's layout order (after Join)
};

}  // namespace muloco
