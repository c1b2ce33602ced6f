// The worker's view of the server: the calls a worker makes, whatever carries them. Two
// implementations: ServerClient (gRPC, worker/client.h) and LocalTransport (in-process over
// a RoundEngine, inprocess/local_transport.h: tests and simulations run N workers in one
// process). Both return the engine's status codes (server/round_engine.h); what a worker
// does with each code is in worker/session.cc and worker/retry.h. Thread-safe: a worker's
// heartbeat thread calls Heartbeat while its main thread pushes or waits.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/landed.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

// θ_pub at the start of a round, checksum-verified by the transport.
struct FetchedModel {
  uint64_t round = 0;
  uint64_t checksum = 0;
  std::vector<float> params;
};

// The global update that closed a round (the downlink payload) and what follows it.
struct RoundResult {
  uint64_t round = 0, next_round = 0, checksum = 0;
  uint32_t contributors = 0;
  bool done = false;
  std::string payload;
  std::vector<LandedRange> landed;  // where this worker's push did not count in full (empty: it all did)
  bool mine = false;                // this worker's push counts in this round
};

// What a push says of itself beside its payload.
struct PushNote {
  float train_loss = 0;      // the round's mean inner loss, for the server's logs
  uint32_t inner_steps = 0;  // inner steps the payload holds (0: the run's H); the server caps what it counts
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Admits this worker. The transport keeps the returned session and presents it on every
  // later call.
  // `model`: the worker's own tensors (empty: it builds the run's model from the config).
  virtual absl::StatusOr<v1::JoinResponse> Join(const std::string& name, const std::string& token,
                                                const v1::ModelLayout& model = {}) = 0;
  // The whole public model of the open round.
  virtual absl::StatusOr<FetchedModel> FetchModel(uint64_t worker_id) = 0;
  virtual absl::Status Push(uint64_t worker_id, uint64_t round, const std::string& payload, const PushNote& note) = 0;
  // Waits for `round` to close, however long that takes. CANCELLED once CancelAwaits() was called.
  virtual absl::StatusOr<RoundResult> AwaitRound(uint64_t worker_id, uint64_t round) = 0;
  // Ends the AwaitRound in flight and makes every later one return CANCELLED at once.
  virtual void CancelAwaits() = 0;
  // Returns the inner steps the server tells this worker to take from its next local round
  // on (0: the run's H).
  virtual absl::StatusOr<uint32_t> Heartbeat(uint64_t worker_id, const v1::WorkerReport& report) = 0;
  virtual absl::Status Leave(uint64_t worker_id) = 0;
  // Where the server is, for log lines ("localhost:7070", "in-process").
  virtual std::string Describe() const = 0;
  // Waits `s` seconds between retries; a network transport reconnects meanwhile.
  virtual void Pause(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }
};

}  // namespace muloco
