// The inner loop of one worker, with no gRPC in it: H inner steps (AdamW, or Muon + AdamW)
// from the global parameters, the pseudo-gradient Δ = θ_global − θ_local, and validation loss. The AdamW
// state persists across rounds. The model, optimizer state and Δ live on the compute device
// (device.h); parameters in and out pass through host memory. LibTorch stays behind this
// header (pimpl).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "muloco/v1/muloco.pb.h"
#include "common/model_layout.h"
#include "worker/data.h"
#include "worker/device.h"
#include "worker/device_floats.h"

namespace muloco {

class Trainer {
 public:
  // `corpus` must outlive the trainer; `seed` picks this worker's batches; `groups`: the
  // run's layout, whose optimizer groups (the server's --adamw_params) replace the model's own.
  // REQUIRES: ValidateRunConfig(config).ok(); a device from ResolveDevice; `groups`, if given,
  // holds the model's tensors in its order.
  Trainer(const v1::RunConfig& config, const Corpus* corpus, uint64_t seed, const ComputeDevice& device = {},
          const ParamLayout* groups = nullptr);
  ~Trainer();

  size_t num_params() const;
  void SetParams(const float* flat);
  void GetParams(float* flat) const;

  // One AdamW step at global inner step `step` (schedule position); returns the batch loss.
  double InnerStep(uint64_t step);
  // The same step on a given batch: batch_size rows of context + 1 tokens, row-major.
  double InnerStepOn(const std::vector<int64_t>& tokens, uint64_t step);

  // Called after each inner step with the steps done so far this round; returning false
  // stops the round early (delta then holds a partial round, not to be pushed).
  using StepCallback = std::function<bool(uint32_t steps_done)>;

  // `steps` inner steps from the current parameters (global step first_step onwards); returns
  // the mean training loss over the steps taken.
  double TrainSteps(uint64_t first_step, uint32_t steps, const StepCallback& after_step = nullptr);

  // SignMuon: one gradient at `global`; writes each tensor's direction (Muon's polar factor
  // of its momentum for hidden matrices, Adam's m_hat / (sqrt(v_hat) + eps) for the rest)
  // into delta(); its signs are the worker's vote. Returns the batch loss.
  double SignDirection(const float* global);

  // The pseudo-gradient (or SignMuon direction) of the last round, on the compute device.
  DeviceFloats& delta();

  // Overlap (see session.cc): MarkPush remembers the parameters a round was pushed from;
  // Rebase(pub) moves the parameters onto the new public model keeping the progress since:
  // θ ← θ + (pub − θ_push); DeltaFrom(pub) sets delta() = pub − θ. `pub`: host memory.
  void MarkPush();
  // The push was refused (never merged): its progress counts again, θ_push ← θ_push + delta()
  // (the model it was pushed from), so that Rebase(pub) keeps it along with what came since.
  // Call before the next DeltaFrom.
  void UnmarkPush();
  void Rebase(const float* pub);
  void DeltaFrom(const float* pub);

  // The local training as bytes (a worker's --state_file, session.cc): the parameters θ, the
  // base its progress counts from (`base`, host memory; null: the MarkPush parameters) and
  // the optimizers' state. RestoreState takes such bytes from a trainer of the same model and
  // optimizers: θ and the optimizers' state become the saved ones and the base the MarkPush
  // parameters, so Rebase(pub) moves the saved progress onto `pub`. INVALID_ARGUMENT for
  // bytes that do not parse or hold another model's or optimizers' tensors; the trainer may
  // then be half restored and is to be replaced.
  std::string SaveState(const float* base) const;
  absl::Status RestoreState(const std::string& bytes);

  // Names of the tensors Muon updates (empty for AdamW runs).
  std::vector<std::string> MuonTensorNames() const;

  // Mean validation loss of `flat` over the run's fixed validation windows (no grad).
  // Leaves the model's own parameters unchanged.
  double Evaluate(const float* flat);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace muloco
