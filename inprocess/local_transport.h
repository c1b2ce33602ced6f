// A worker's transport to a RoundEngine in the same process: the same calls and status codes
// as the gRPC client without a network, admission or sessions (there are no strangers in
// one process). Tests run N real workers (worker/session.h) against one engine with it, and
// bench/scale drives the engine with simulated workers through it.
#pragma once

#include <atomic>
#include <string>

#include "common/model_layout.h"
#include "server/round_engine.h"
#include "worker/transport.h"

namespace muloco {

class LocalTransport : public Transport {
 public:
  // `engine` must outlive the transport; `config` (and `layout`, when the run's model is not
  // the config's GPT) is what Join hands the worker.
  LocalTransport(RoundEngine* engine, v1::RunConfig config, const ParamLayout& layout = {})
      : engine_(engine), config_(std::move(config)), layout_(layout.empty() ? v1::ModelLayout() : LayoutProto(layout)) {}

  absl::StatusOr<v1::JoinResponse> Join(const std::string& name, const std::string& token,
                                        const v1::ModelLayout& model = {}) override;
  absl::StatusOr<FetchedModel> FetchModel(uint64_t worker_id) override;
  absl::Status Push(uint64_t worker_id, uint64_t round, const std::string& payload, const PushNote& note) override;
  absl::StatusOr<RoundResult> AwaitRound(uint64_t worker_id, uint64_t round) override;
  void CancelAwaits() override { cancelled_ = true; }
  absl::StatusOr<uint32_t> Heartbeat(uint64_t worker_id, const v1::WorkerReport& report) override;
  absl::Status Leave(uint64_t worker_id) override;
  std::string Describe() const override { return "in-process"; }
  // Complete model fetches served (tests: a worker that builds the initial model fetches none).
  uint64_t fetches() const { return fetches_.load(); }

 private:
  RoundEngine* const engine_;
  const v1::RunConfig config_;
  const v1::ModelLayout layout_;
  std::atomic<bool> cancelled_{false};
  std::atomic<uint64_t> fetches_{0};
};

}  // namespace muloco
