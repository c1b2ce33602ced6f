// The worker's gRPC client: one method per RPC, chunked streams assembled and checked here,
// gRPC statuses returned as absl::Status with their codes. No training logic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <grpcpp/security/credentials.h>

#include "muloco/v1/muloco.grpc.pb.h"

namespace muloco {

struct ClientOptions {
  size_t chunk_bytes = 1 << 20;  // bytes per pushed chunk
  double call_timeout_s = 600;   // deadline of a unary call or one AwaitRound (asked again while the round is open)
  // A model fetch or a push is cancelled when no chunk moves for this long, however long the
  // whole transfer takes: deadlines follow progress, so a large model over a slow link
  // finishes and a dead link does not hang. Chunks must fit: chunk bytes / link rate < this.
  double stall_timeout_s = 120;
  int fetch_attempts = 50;       // a model fetch resumes after a cut this many times
  std::string tls_server_name;   // check the server's certificate for this name (empty: the address's host)
};

struct FetchedModel {
  uint64_t round = 0;
  uint64_t checksum = 0;
  std::vector<float> params;
};

struct RoundResult {
  uint64_t round = 0, next_round = 0, checksum = 0;
  uint32_t contributors = 0;
  bool done = false;
  std::string payload;
};

class ServerClient {
 public:
  // `credentials`: from MakeChannelCredentials (common/tls.h).
  ServerClient(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
               ClientOptions options);

  absl::StatusOr<v1::JoinResponse> Join(const std::string& name, const std::string& token);
  // The session every later call presents (from JoinResponse). Set before other calls.
  void SetSession(uint64_t worker_id, const std::string& key);
  // Whole model, each chunk and the whole checksum-verified; a cut stream resumes where it
  // stopped (from the start if the model moved on meanwhile).
  absl::StatusOr<FetchedModel> FetchModel(uint64_t worker_id);
  absl::Status Push(uint64_t worker_id, uint64_t round, const std::string& payload, float train_loss);
  // Waits for the round to close, asking again each time the server's long poll ends.
  // Returns CANCELLED once CancelAwaits() has been called.
  absl::StatusOr<RoundResult> AwaitRound(uint64_t worker_id, uint64_t round);
  // Cancels the AwaitRound in flight and makes every later one return CANCELLED at once.
  // Thread-safe (the worker calls it from its stop watcher while AwaitRound blocks).
  void CancelAwaits();
  absl::Status Heartbeat(uint64_t worker_id, const v1::WorkerReport& report);
  absl::Status Leave(uint64_t worker_id);

 private:
  // Sets the deadline (seconds) and the session metadata.
  void Prepare(grpc::ClientContext& ctx, double timeout_s) const;
  absl::StatusOr<RoundResult> AwaitOnce(uint64_t worker_id, uint64_t round);
  absl::Status FetchFrom(uint64_t worker_id, FetchedModel* m, size_t* filled, double stall_s);
  template <typename Request, typename Reply, typename Call>
  absl::Status ShortCall(Call call, uint64_t worker_id, const std::function<void(Request*)>& fill = nullptr);

  ClientOptions options_;
  std::mutex await_mu_;
  grpc::ClientContext* await_ctx_ = nullptr;  // guarded by await_mu_: the AwaitRound call in flight
  bool awaits_cancelled_ = false;             // guarded by await_mu_
  mutable std::mutex session_mu_;
  std::string session_id_, session_key_;  // guarded by session_mu_ (the heartbeat thread reads them)
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Muloco::Stub> stub_;
};

}  // namespace muloco
