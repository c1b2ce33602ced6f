// The worker's gRPC transport (worker/transport.h): one method per RPC, chunked streams
// assembled and checked here, gRPC statuses returned as absl::Status with their codes. No
// training logic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <grpcpp/security/credentials.h>

#include "muloco/v1/muloco.grpc.pb.h"
#include "worker/transport.h"
#include "worker/worker_options.h"

namespace muloco {

struct ClientOptions {
  size_t chunk_bytes = 1 << 20;  // bytes per pushed chunk
  double call_timeout_s = 600;   // deadline of a unary call or one AwaitRound (asked again while the round is open)
  // A model fetch or a push is cancelled when no chunk moves for this long, however long the
  // whole transfer takes: deadlines follow progress, so a large model over a slow link
  // finishes and a dead link does not hang. Chunks must fit: chunk bytes / link rate < this.
  double stall_timeout_s = 120;
  int fetch_attempts = 50;       // a model fetch resumes after a cut this many times
  // Deadline of a heartbeat: the heartbeat period, so that the next one leaves on time while
  // a reply waits behind a large download on a slow link (the request itself reaches the
  // server at once; the server counts it as hearing from the worker).
  double heartbeat_timeout_s = 10;
  std::string tls_server_name;   // check the server's certificate for this name (empty: the address's host)
};

class ServerClient : public Transport {
 public:
  // `credentials`: from MakeChannelCredentials (common/tls.h).
  ServerClient(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
               ClientOptions options);

  // Presents the returned session (metadata muloco-worker / muloco-session) on later calls.
  absl::StatusOr<v1::JoinResponse> Join(const std::string& name, const std::string& token,
                                        const v1::ModelLayout& model = {}) override;
  // Whole model, each chunk and the whole checksum-verified; a cut stream resumes where it
  // stopped (from the start if the model moved on meanwhile), paced by Backoff (retry.h).
  absl::StatusOr<FetchedModel> FetchModel(uint64_t worker_id) override;
  // A push cut by a stalled or broken link resumes on the next call for the same payload
  // from the bytes the server kept (PushProgress), instead of from its start.
  absl::Status Push(uint64_t worker_id, uint64_t round, const std::string& payload, const PushNote& note) override;
  // Asks again each time the server's long poll ends with the round still open.
  absl::StatusOr<RoundResult> AwaitRound(uint64_t worker_id, uint64_t round) override;
  void CancelAwaits() override;
  absl::StatusOr<uint32_t> Heartbeat(uint64_t worker_id, const v1::WorkerReport& report) override;
  absl::Status Leave(uint64_t worker_id) override;
  std::string Describe() const override { return address_; }
  // Drives the channel's reconnection while it waits: gRPC notices a connect, and the
  // server's first frames, only while some thread polls the channel; with no call in flight
  // that is its backup poller, every 5 s, and a reconnect attempt times out sooner (found
  // when a worker never came back after a cut link).
  void Pause(double s) override;

 private:
  void SetSession(uint64_t worker_id, const std::string& key);
  // Sets the deadline (seconds) and the session metadata.
  void Prepare(grpc::ClientContext& ctx, double timeout_s) const;
  absl::StatusOr<RoundResult> AwaitOnce(uint64_t worker_id, uint64_t round);
  // One PushUpdate stream sending payload[offset...].
  absl::Status PushFrom(uint64_t worker_id, uint64_t round, const std::string& payload, uint64_t checksum,
                        size_t offset, const PushNote& note);
  absl::Status FetchFrom(uint64_t worker_id, FetchedModel* m, size_t* filled, double stall_s);
  template <typename Request, typename Reply, typename Call>
  absl::Status ShortCall(Call call, uint64_t worker_id, double deadline_s,
                         const std::function<void(Request*)>& fill = nullptr, Reply* reply = nullptr);

  const std::string address_;
  std::pair<uint64_t, uint64_t> cut_push_;  // (round, payload checksum) of a push whose last try was cut (Push's thread only)
  ClientOptions options_;
  absl::Mutex await_mu_;
  grpc::ClientContext* await_ctx_ ABSL_GUARDED_BY(await_mu_) = nullptr;  // the AwaitRound call in flight
  bool awaits_cancelled_ ABSL_GUARDED_BY(await_mu_) = false;
  mutable absl::Mutex session_mu_;
  // The heartbeat thread reads them.
  std::string session_id_ ABSL_GUARDED_BY(session_mu_);
  std::string session_key_ ABSL_GUARDED_BY(session_mu_);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Muloco::Stub> stub_;
};

// The client's options from a worker's (muloco-worker's flags, or the Python package's).
ClientOptions ClientOptionsFor(const WorkerOptions& o);

// The join token on the first line of `path` (surrounding whitespace dropped);
// INVALID_ARGUMENT naming the file when it cannot be read or holds none.
absl::StatusOr<std::string> ReadJoinToken(const std::string& path);

}  // namespace muloco
