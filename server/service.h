// The gRPC adapter over RoundEngine: admits workers and checks every call's session
// (server/auth.h), turns calls into engine calls and engine statuses into gRPC statuses,
// chunks streams, validates message framing and bounds what one peer can hold: bytes per
// push (checked while reading), chunks per push, calls in flight, idle streams
// (server/watchdog.h) and the length of one AwaitRound. No round logic lives here.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "muloco/v1/muloco.grpc.pb.h"
#include "common/histogram.h"
#include "common/model_layout.h"
#include "server/auth.h"
#include "server/round_engine.h"
#include "server/watchdog.h"

namespace muloco {

// Bytes this service actually wrote to workers (the engine counts payloads once per round),
// and the calls it refused before they reached the engine.
struct WireStats {
  uint64_t updates_sent = 0, update_bytes_sent = 0;  // AwaitRound replies and their payload bytes
  uint64_t model_fetches = 0, model_bytes_sent = 0;  // completed FetchModel streams; parameter bytes sent
  uint64_t idle_cancelled = 0;                       // streams cancelled for making no progress
  uint64_t oversized_pushes = 0;                     // pushes refused for size or chunk count
  HistogramData push_durations, fetch_durations;     // seconds per authenticated PushUpdate / FetchModel
};

struct ServiceOptions {
  size_t chunk_bytes = 1 << 20;     // bytes per streamed chunk (model and updates)
  uint64_t max_payload_bytes = 0;   // larger pushes are refused (0: a dense fp32 model's size)
  size_t max_push_chunks = 4096;    // chunks in one push
  double max_await_s = 30;          // one AwaitRound waits this long at most, then DEADLINE_EXCEEDED: ask again
  double idle_timeout_s = 60;       // a stream that moves no chunk for this long is cancelled
};

class MulocoService final : public v1::Muloco::Service {
 public:
  // `engine`, `auth` and `clock` must outlive the service; `layout` is the run's model.
  MulocoService(RoundEngine* engine, Auth* auth, v1::RunConfig config, ParamLayout layout, ServiceOptions options,
                const Clock* clock);

  // Makes blocked AwaitRound calls return UNAVAILABLE (server shutting down).
  void BeginShutdown() { shutting_down_ = true; }
  WireStats Wire() const;
  // Streaming calls in flight (a stalled one is cancelled after idle_timeout_s).
  size_t StreamsInFlight() { return watchdog_.watched(); }

  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest*, v1::JoinResponse*) override;
  grpc::Status FetchModel(grpc::ServerContext*, const v1::FetchModelRequest*,
                          grpc::ServerWriter<v1::ModelChunk>*) override;
  grpc::Status PushUpdate(grpc::ServerContext*, grpc::ServerReader<v1::UpdateChunk>*, v1::PushReply*) override;
  grpc::Status AwaitRound(grpc::ServerContext*, const v1::AwaitRoundRequest*,
                          grpc::ServerWriter<v1::RoundChunk>*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatReply*) override;
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*, v1::LeaveReply*) override;
  grpc::Status PushProgress(grpc::ServerContext*, const v1::PushProgressRequest*, v1::PushProgressReply*) override;

 private:
  // A push cut before its last byte (a stalled link, a cancelled call), kept so that the
  // worker's next try resumes where it stopped: at most one per worker, only for the open
  // round, only for pushes that name their payload's checksum.
  struct PartialPush {
    uint64_t round = 0, checksum = 0, total = 0;
    std::string bytes;
  };
  void KeepPartial(uint64_t worker, PartialPush partial);
  // Removes and returns `worker`'s kept push when it is of (round, checksum).
  std::optional<PartialPush> TakePartial(uint64_t worker, uint64_t round, uint64_t checksum);
  // `worker`'s kept push when it is of (round, checksum), else null. REQUIRES: partial_mu_ held.
  PartialPush* FindPartialLocked(uint64_t worker, uint64_t round, uint64_t checksum)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(partial_mu_);
  // The worker this call speaks for, from its metadata, after checking its session key.
  // `claimed` (the message's worker_id; none for PushUpdate, checked per chunk) must name
  // the same worker.
  absl::StatusOr<uint64_t> Authenticate(const grpc::ServerContext* ctx, std::optional<uint64_t> claimed);
  // Authenticate + a slot among the worker's calls in flight.
  absl::StatusOr<Auth::Stream> AuthenticateStream(const grpc::ServerContext* ctx, std::optional<uint64_t> claimed,
                                                  uint64_t* id);
  // A joining worker's model against the run's (names and shapes): FAILED_PRECONDITION
  // naming the first differing tensor.
  grpc::Status CheckModel(const v1::ModelLayout& theirs) const;
  // A push refused for its framing or size: counted, and returned as `code`.
  grpc::Status Malformed(grpc::StatusCode code, const std::string& message);
  // Checks a push's first chunk (checksum named, declared size within bounds) and starts its
  // payload: empty, or the kept bytes of a cut push it resumes.
  grpc::Status StartPayload(const v1::UpdateChunk& first, std::string* payload);
  // Reads the push's chunks from `chunk` (the first) on into *payload and checks it whole
  // (declared size, checksum for its round); a cancelled read's bytes are kept for a resume.
  grpc::Status ReadPayload(grpc::ServerContext* ctx, grpc::ServerReader<v1::UpdateChunk>* reader,
                           Watchdog::Watch* watch, v1::UpdateChunk chunk, std::string* payload);

  RoundEngine* const engine_;
  Auth* const auth_;
  const v1::RunConfig config_;
  const ParamLayout layout_;
  const v1::ModelLayout layout_proto_;
  const ServiceOptions options_;
  const size_t max_payload_bytes_;
  const Clock* const clock_;
  Watchdog watchdog_;
  Histogram push_durations_{DurationBuckets()}, fetch_durations_{DurationBuckets()};
  std::atomic<bool> shutting_down_{false};
  absl::Mutex partial_mu_;
  absl::CondVar push_ended_;
  std::map<uint64_t, PartialPush> partials_ ABSL_GUARDED_BY(partial_mu_);  // by worker id
  std::map<uint64_t, int> pushing_ ABSL_GUARDED_BY(partial_mu_);  // PushUpdate calls being read, by worker
  std::atomic<uint64_t> updates_sent_{0}, update_bytes_sent_{0}, model_fetches_{0}, model_bytes_sent_{0},
      oversized_pushes_{0};
};

}  // namespace muloco
