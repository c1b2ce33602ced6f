// A worker for a model of one's own: the library behind the Python package (python/) and
// TorchModelWorker (worker/torch_model_worker.h). It joins with the model's tensors (names
// and shapes, checked against the run's layout), then, once per outer step, Sync pushes
// Δ = θ_pub − θ from the caller's tensors and writes the new public model into them. With
// WorkerOptions::overlap the exchange runs in the background while the caller trains the next
// round; Land rebases the tensors onto the new model when it arrives
// (θ += θ_pub,new − θ_pushed, as muloco-worker --overlap does). The tensors are float32
// host memory, one pointer per tensor in the run's layout order, each holding its numel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_layout.h"
#include "worker/core.h"
#include "worker/worker_options.h"

namespace muloco {

// What the caller's training did in the round being pushed (for its counters and logs).
struct SyncReport {
  double train_loss = 0;
  uint64_t tokens = 0;
  uint32_t steps = 0;  // 0: the run's inner_steps
  double train_seconds = 0;
};

struct SyncResult {
  uint64_t round = 0;         // the round now being trained (the public model's, or the one after the flight's)
  bool applied = false;       // the update was applied (overlap: the push is on its way, or landed)
  bool in_flight = false;     // overlap: the push's round has not closed yet
  bool done = false;          // the run has no more rounds to train
  uint32_t contributors = 0;  // of the round that closed (0 while in flight)
  uint64_t checksum = 0;      // xxh64 of the public model this worker last received
};

class ModelWorker {
 public:
  using Tensors = std::vector<float*>;

  // `model`: the tensors' names and shapes, in any order. `transport` must outlive this.
  ModelWorker(WorkerOptions o, Transport* transport, std::string token, ParamLayout model);
  ~ModelWorker();  // drops a flight still in the air (Leave lands it)

  // Joins, starts the uplink and heartbeats, and fetches the public model.
  absl::Status Join();
  const ParamLayout& layout() const { return core_.layout(); }  // the run's, in tensor order
  const v1::RunConfig& config() const { return core_.config(); }
  // θ_pub into the tensors (nothing may be in flight).
  absl::Status ReadModel(const Tensors& t) const;

  // Ends the round: Δ = θ_pub − θ pushed (compressed, with error feedback). Without overlap
  // it waits for the round to close and writes the new θ_pub into the tensors; a push the
  // server refuses as late resyncs (the round's work is dropped: applied = false, the
  // tensors hold the server's model). With overlap, a flight still in the air lands first
  // (waiting for it), then this round flies and Sync returns at once.
  absl::StatusOr<SyncResult> Sync(const Tensors& t, const SyncReport& r);
  // Overlap: counts one inner step of the caller's and says whether the flight should land
  // now: it has arrived, or (overlap_steps = K) this was the K-th step since the push.
  bool LandDue();
  // Overlap: lands the flight (waiting for it): rebases the tensors onto the new model; a
  // flight whose push was refused or whose round ended the run writes θ_pub itself.
  // Returns whether the update was applied. Nothing in flight: returns true.
  absl::StatusOr<bool> Land(const Tensors& t);
  bool in_flight() const { return flight_.active(); }
  // Lands a flight still in the air when `t` is given, then leaves the run.
  void Leave(const Tensors* t = nullptr);

  uint64_t round() const;     // the round being trained
  bool done() const { return round() >= config().total_rounds(); }
  uint64_t checksum() const { return checksum_; }
  uint64_t id() const { return core_.id(); }
  uint32_t inner_steps() const { return core_.InnerSteps(); }  // for the next local round (the server's tell, else H)
  size_t num_params() const { return core_.num_params(); }
  WorkerCore& core() { return core_; }

 private:
  void Gather(const Tensors& t, std::vector<float>* out) const;
  void Scatter(const std::vector<float>& from, const Tensors& t) const;
  absl::Status Check(const Tensors& t) const;
  absl::StatusOr<std::string> Encode(const Tensors& t, uint64_t round);

  const WorkerOptions o_;
  WorkerCore core_;
  std::vector<float> delta_;   // θ gathered, then Δ
  std::vector<float> pushed_;  // overlap: θ at the push, for the rebase
  Flight flight_;
  uint32_t steps_since_push_ = 0;
  uint64_t checksum_ = 0;
};

}  // namespace muloco
