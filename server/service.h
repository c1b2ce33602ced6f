// The gRPC adapter over RoundEngine: turns calls into engine calls and engine statuses into
// gRPC statuses, chunks streams, and validates message framing. No round logic lives here.
#pragma once

#include <atomic>
#include <cstddef>

#include "muloco/v1/muloco.grpc.pb.h"
#include "server/round_engine.h"

namespace muloco {

// Bytes this service actually wrote to workers (the engine counts payloads once per round).
struct WireStats {
  uint64_t updates_sent = 0, update_bytes_sent = 0;  // AwaitRound replies and their payload bytes
  uint64_t model_fetches = 0, model_bytes_sent = 0;  // completed FetchModel streams; parameter bytes sent
};

struct ServiceOptions {
  size_t chunk_bytes = 1 << 20;     // bytes per streamed chunk (model and updates)
  uint64_t max_payload_bytes = 0;   // larger pushes are refused (0: a dense fp32 model's size)
};

class MulocoService final : public v1::Muloco::Service {
 public:
  // `engine` must outlive the service.
  MulocoService(RoundEngine* engine, v1::RunConfig config, ServiceOptions options);

  // Makes blocked AwaitRound calls return UNAVAILABLE (server shutting down).
  void BeginShutdown() { shutting_down_ = true; }
  WireStats Wire() const;

  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest*, v1::JoinResponse*) override;
  grpc::Status FetchModel(grpc::ServerContext*, const v1::FetchModelRequest*,
                          grpc::ServerWriter<v1::ModelChunk>*) override;
  grpc::Status PushUpdate(grpc::ServerContext*, grpc::ServerReader<v1::UpdateChunk>*, v1::PushReply*) override;
  grpc::Status AwaitRound(grpc::ServerContext*, const v1::AwaitRoundRequest*,
                          grpc::ServerWriter<v1::RoundChunk>*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatReply*) override;
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*, v1::LeaveReply*) override;

 private:
  RoundEngine* const engine_;
  const v1::RunConfig config_;
  const ServiceOptions options_;
  const size_t max_payload_bytes_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> updates_sent_{0}, update_bytes_sent_{0}, model_fetches_{0}, model_bytes_sent_{0};
};

}  // namespace muloco
