// MulocoService: gRPC calls -> RoundEngine calls, each authenticated first.
#include "server/service.h"

#include "absl/cleanup/cleanup.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "codec/checksum.h"
#include "common/grpc_status.h"
#include "common/log.h"

namespace muloco {
namespace {

constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

std::string Metadata(const grpc::ServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// Observes the seconds from its construction to its destruction.
class Timer {
 public:
  Timer(Histogram* h, const Clock* clock) : h_(h), clock_(clock), start_(clock->Now()) {}
  ~Timer() { h_->Observe(clock_->Now() - start_); }

 private:
  Histogram* const h_;
  const Clock* const clock_;
  const double start_;
};

}  // namespace

MulocoService::MulocoService(RoundEngine* engine, Auth* auth, v1::RunConfig config, ParamLayout layout,
                             ServiceOptions options, const Clock* clock)
    : engine_(engine),
      auth_(auth),
      config_(std::move(config)),
      layout_(std::move(layout)),
      layout_proto_(LayoutProto(layout_)),
      options_(options),
      max_payload_bytes_(options.max_payload_bytes ? options.max_payload_bytes
                                                   : PayloadBytes(DenseSegments(engine->num_params()))),
      clock_(clock),
      watchdog_(options.idle_timeout_s, clock) {}

WireStats MulocoService::Wire() const {
  return WireStats{updates_sent_.load(),     update_bytes_sent_.load(), model_fetches_.load(),
                   model_bytes_sent_.load(), watchdog_.cancelled(),     oversized_pushes_.load(),
                   push_durations_.Snapshot(), fetch_durations_.Snapshot()};
}

absl::StatusOr<uint64_t> MulocoService::Authenticate(const grpc::ServerContext* ctx,
                                                     std::optional<uint64_t> claimed) {
  uint64_t id = 0;
  const std::string id_text = Metadata(ctx, "muloco-worker");
  if (id_text.empty() || !absl::SimpleAtoi(id_text, &id)) {
    return absl::UnauthenticatedError("call without a worker id (metadata muloco-worker); join first");
  }
  if (claimed && *claimed != id) {
    return absl::PermissionDeniedError(absl::StrCat("message names worker ", *claimed, ", session is worker ", id));
  }
  bool revoked = false;
  absl::Status s = auth_->Check(id, Metadata(ctx, "muloco-session"), &revoked);
  if (revoked) engine_->Leave(id).IgnoreError();  // a revoked token's workers are out at once
  if (!s.ok()) return s;
  if (!engine_->IsMember(id)) {  // evicted or left: the session goes too
    auth_->Close(id);
    return absl::NotFoundError(absl::StrCat("unknown worker ", id, "; join again"));
  }
  return id;
}

absl::StatusOr<Auth::Stream> MulocoService::AuthenticateStream(const grpc::ServerContext* ctx,
                                                                std::optional<uint64_t> claimed, uint64_t* id) {
  absl::StatusOr<uint64_t> who = Authenticate(ctx, claimed);
  if (!who.ok()) return who.status();
  *id = *who;
  return auth_->BeginStream(*who);
}

grpc::Status MulocoService::CheckModel(const v1::ModelLayout& theirs) const {
  if (theirs.tensors_size() == 0) return grpc::Status::OK;  // it builds the run's model from the config
  if (theirs.tensors_size() > 100000) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a model of more than 100000 tensors");
  }
  absl::StatusOr<ParamLayout> have = LayoutFromProto(theirs);
  if (!have.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(have.status().message()));
  const std::string difference = LayoutDifference(layout_, *have);
  if (!difference.empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("this worker's model is not the run's: ", difference));
  }
  return grpc::Status::OK;
}

grpc::Status MulocoService::Join(grpc::ServerContext*, const v1::JoinRequest* req, v1::JoinResponse* resp) {
  if (req->protocol_version() != 1) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("protocol version ", req->protocol_version(), " unsupported; this server speaks 1"));
  }
  if (req->name().size() > 256) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name longer than 256 bytes");
  if (req->token().size() > 1024) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "token longer than 1024 bytes");
  absl::StatusOr<std::string> label = auth_->Admit(req->token());
  if (!label.ok()) return ToGrpcStatus(label.status());
  if (grpc::Status s = CheckModel(req->layout()); !s.ok()) {
    auth_->Release(req->token());
    return s;
  }
  // A token's sessions are one participant (its label); open joins are each their own.
  const std::string participant = req->token().empty() ? "" : *label;
  RoundEngine::Joined j =
      engine_->Join(absl::StrCat(SafeName(req->name()), "@", *label), participant, auth_->WeightOf(*label));
  resp->set_session_key(auth_->Open(j.worker_id, req->token()));
  resp->set_worker_id(j.worker_id);
  resp->set_round(j.round);
  *resp->mutable_config() = config_;
  *resp->mutable_layout() = layout_proto_;
  resp->set_num_params(engine_->num_params());
  resp->set_model_checksum(j.checksum);
  resp->set_join_index(j.join_index);
  resp->set_max_staleness(engine_->max_staleness());
  return grpc::Status::OK;
}

grpc::Status MulocoService::FetchModel(grpc::ServerContext* ctx, const v1::FetchModelRequest* req,
                                       grpc::ServerWriter<v1::ModelChunk>* writer) {
  uint64_t id = 0;
  absl::StatusOr<Auth::Stream> slot = AuthenticateStream(ctx, req->worker_id(), &id);
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  if (absl::Status s = engine_->Heartbeat(id); !s.ok()) return ToGrpcStatus(s);
  ModelSnapshot snap = engine_->Snapshot();
  const size_t n = snap.params->size();
  if (req->offset() > n) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("offset ", req->offset(), " > ", n));
  }
  const std::unique_ptr<Watchdog::Watch> watch = watchdog_.Start(ctx);
  const Timer timer(&fetch_durations_, clock_);
  const size_t per_chunk = std::max<size_t>(1, options_.chunk_bytes / sizeof(float));
  size_t offset = req->offset();
  do {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled (or idle too long)");
    const size_t count = std::min(per_chunk, n - offset);
    v1::ModelChunk chunk;
    chunk.set_round(snap.round);
    chunk.set_num_params(n);
    chunk.set_model_checksum(snap.checksum);
    chunk.set_offset(offset);
    chunk.set_data(reinterpret_cast<const char*>(snap.params->data() + offset), count * sizeof(float));
    chunk.set_chunk_checksum(Checksum64(chunk.data().data(), chunk.data().size()));
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
    watch->Progress();
    model_bytes_sent_ += count * sizeof(float);
    offset += count;
  } while (offset < n);
  ++model_fetches_;
  return grpc::Status::OK;
}

grpc::Status MulocoService::Malformed(grpc::StatusCode code, const std::string& message) {
  engine_->CountMalformedPush();
  if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) ++oversized_pushes_;
  return grpc::Status(code, message);
}

grpc::Status MulocoService::StartPayload(const v1::UpdateChunk& first, std::string* payload) {
  const uint64_t total = first.total_bytes();
  if (first.payload_checksum() == 0) {
    return Malformed(kInvalid, "push without its payload checksum (xxh64 of the payload, seeded with the round)");
  }
  if (total > max_payload_bytes_) {
    return Malformed(kInvalid,
                     absl::StrCat("declared payload of ", total, " bytes exceeds the limit of ", max_payload_bytes_));
  }
  if (first.offset() == 0) {
    payload->reserve(std::min<uint64_t>(total, 1 << 20));  // grows as bytes arrive, not as declared
    return grpc::Status::OK;
  }
  // Resuming a cut push: continue the bytes kept from it.
  std::optional<PartialPush> kept = TakePartial(first.worker_id(), first.round(), first.payload_checksum());
  if (!kept || kept->total != total || kept->bytes.size() != first.offset()) {
    return grpc::Status(grpc::StatusCode::ABORTED, "no kept push to resume at that offset; push from the start");
  }
  *payload = std::move(kept->bytes);
  return grpc::Status::OK;
}

grpc::Status MulocoService::ReadPayload(grpc::ServerContext* ctx, grpc::ServerReader<v1::UpdateChunk>* reader,
                                        Watchdog::Watch* watch, v1::UpdateChunk chunk, std::string* payload) {
  const uint64_t worker = chunk.worker_id(), round = chunk.round(), total = chunk.total_bytes(),
                 checksum = chunk.payload_checksum();
  size_t chunks = 0;
  do {
    watch->Progress();
    if (++chunks > options_.max_push_chunks) {
      return Malformed(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("push of more than ", options_.max_push_chunks, " chunks"));
    }
    if (chunk.worker_id() != worker || chunk.round() != round || chunk.payload_checksum() != checksum) {
      return Malformed(kInvalid, "chunks of one push disagree on worker, round or payload checksum");
    }
    // Every chunk is numbered by its offset in the payload.
    if (chunk.offset() != payload->size()) return Malformed(kInvalid, "push chunk out of order (offset)");
    if (chunk.data().empty() && total != 0) return Malformed(kInvalid, "empty chunk in a push");
    if (chunk.data().size() > total - payload->size()) {
      return Malformed(kInvalid, absl::StrCat("push exceeds its declared ", total, " bytes"));
    }
    payload->append(chunk.data());
  } while (reader->Read(&chunk));
  if (ctx->IsCancelled()) {
    if (!payload->empty() && payload->size() < total) {
      KeepPartial(worker, PartialPush{round, checksum, total, std::move(*payload)});
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled (or idle too long)");
  }
  if (payload->size() != total) {
    return Malformed(kInvalid, absl::StrCat("push ended after ", payload->size(), " of ", total, " declared bytes"));
  }
  if (Checksum64(payload->data(), payload->size(), /*seed=*/round) != checksum) {
    return Malformed(kInvalid, absl::StrCat("payload does not match its checksum for round ", round,
                                            " (xxh64 of the payload, seeded with the round)"));
  }
  return grpc::Status::OK;
}

grpc::Status MulocoService::PushUpdate(grpc::ServerContext* ctx, grpc::ServerReader<v1::UpdateChunk>* reader,
                                       v1::PushReply* reply) {
  // Credentials come in metadata, so nothing is read from a stranger's stream.
  uint64_t me = 0;
  absl::StatusOr<Auth::Stream> slot = AuthenticateStream(ctx, std::nullopt, &me);
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  if (absl::Status s = auth_->CountPush(me, engine_->OpenRound()); !s.ok()) return ToGrpcStatus(s);
  const std::unique_ptr<Watchdog::Watch> watch = watchdog_.Start(ctx);
  const Timer timer(&push_durations_, clock_);
  {
    absl::MutexLock lock(&partial_mu_);
    ++pushing_[me];
  }
  // Lets a PushProgress that waits for this call see what it kept.
  const absl::Cleanup ended = [this, me] {
    absl::MutexLock lock(&partial_mu_);
    if (--pushing_[me] == 0) pushing_.erase(me);
    push_ended_.SignalAll();
  };
  v1::UpdateChunk first;
  if (!reader->Read(&first)) return Malformed(kInvalid, "empty push stream");
  if (first.worker_id() != me) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "push names another worker");
  std::string payload;
  if (grpc::Status s = StartPayload(first, &payload); !s.ok()) return s;
  const uint64_t round = first.round();
  const uint32_t inner_steps = first.inner_steps();  // the first chunk's (a resumed push's names it again)
  if (grpc::Status s = ReadPayload(ctx, reader, watch.get(), std::move(first), &payload); !s.ok()) return s;
  // The session may have ended (its token revoked, an eviction) while the bytes came in.
  if (absl::StatusOr<uint64_t> still = Authenticate(ctx, me); !still.ok()) return ToGrpcStatus(still.status());
  if (absl::Status s = engine_->Push(me, round, payload, inner_steps); !s.ok()) return ToGrpcStatus(s);
  reply->set_accepted_bytes(payload.size());
  return grpc::Status::OK;
}

grpc::Status MulocoService::AwaitRound(grpc::ServerContext* ctx, const v1::AwaitRoundRequest* req,
                                       grpc::ServerWriter<v1::RoundChunk>* writer) {
  uint64_t id = 0;
  absl::StatusOr<Auth::Stream> slot = AuthenticateStream(ctx, req->worker_id(), &id);
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  absl::StatusOr<RoundUpdate> update;
  // The engine wakes us when the round closes; the 1 s slices only notice a cancelled call
  // or a shutdown. After max_await_s the caller hears DEADLINE_EXCEEDED and asks again, so
  // no call (and its thread) outlives a bounded time.
  for (double waited = 0;; waited += 1.0) {
    // Waiting counts as liveness; an unknown worker (evicted, or this server restarted from a
    // checkpoint and lost its push) hears NOT_FOUND now instead of waiting for a round that
    // may never close.
    if (absl::Status s = engine_->Heartbeat(id); !s.ok()) return ToGrpcStatus(s);
    update = engine_->AwaitRound(req->round(), std::min(1.0, options_.max_await_s - waited));
    if (update.status().code() != absl::StatusCode::kDeadlineExceeded) break;
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down");
    if (waited + 1.0 >= options_.max_await_s) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "round still open; ask again");
    }
  }
  if (!update.ok()) return ToGrpcStatus(update.status());
  const std::unique_ptr<Watchdog::Watch> watch = watchdog_.Start(ctx);
  const std::string& payload = *update->payload;
  size_t offset = 0;
  do {
    const size_t count = std::min(options_.chunk_bytes, payload.size() - offset);
    v1::RoundChunk chunk;
    chunk.set_round(update->round);
    chunk.set_next_round(update->next_round);
    chunk.set_model_checksum(update->checksum);
    chunk.set_total_bytes(payload.size());
    chunk.set_contributors(update->contributors);
    chunk.set_done(update->done);
    chunk.set_data(payload.data() + offset, count);
    if (offset == 0) chunk.set_caller_pushed(update->pushed != nullptr && update->pushed->count(id) > 0);
    if (offset == 0 && update->landed != nullptr) {  // this worker's own screening outcome
      auto mine = update->landed->find(id);
      if (mine != update->landed->end()) {
        for (const LandedRange& l : mine->second) {
          v1::LandedRange* out = chunk.add_landed();
          out->set_offset(l.offset);
          out->set_count(l.count);
          out->set_fraction(l.fraction);
        }
      }
    }
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
    watch->Progress();
    update_bytes_sent_ += count;
    offset += count;
  } while (offset < payload.size());
  ++updates_sent_;
  return grpc::Status::OK;
}

grpc::Status MulocoService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                      v1::HeartbeatReply* reply) {
  absl::StatusOr<uint64_t> id = Authenticate(ctx, req->worker_id());
  if (!id.ok()) return ToGrpcStatus(id.status());
  const absl::Status s = req->has_report() ? engine_->Report(*id, FromReport(req->report())) : engine_->Heartbeat(*id);
  if (!s.ok()) return ToGrpcStatus(s);
  reply->set_round(engine_->OpenRound());
  reply->set_inner_steps(engine_->TellInnerSteps(*id));
  return grpc::Status::OK;
}

void MulocoService::KeepPartial(uint64_t worker, PartialPush partial) {
  const uint64_t open = engine_->OpenRound();
  absl::MutexLock lock(&partial_mu_);
  for (auto it = partials_.begin(); it != partials_.end();) {  // pushes of closed rounds can never resume
    it = it->second.round < open ? partials_.erase(it) : std::next(it);
  }
  if (partial.round == open && engine_->IsMember(worker)) partials_[worker] = std::move(partial);
}

std::optional<MulocoService::PartialPush> MulocoService::TakePartial(uint64_t worker, uint64_t round,
                                                                     uint64_t checksum) {
  absl::MutexLock lock(&partial_mu_);
  PartialPush* kept = FindPartialLocked(worker, round, checksum);
  if (kept == nullptr) return std::nullopt;
  PartialPush p = std::move(*kept);
  partials_.erase(worker);
  return p;
}

MulocoService::PartialPush* MulocoService::FindPartialLocked(uint64_t worker, uint64_t round, uint64_t checksum) {
  auto it = partials_.find(worker);
  if (it == partials_.end() || it->second.round != round || it->second.checksum != checksum) return nullptr;
  return &it->second;
}

grpc::Status MulocoService::PushProgress(grpc::ServerContext* ctx, const v1::PushProgressRequest* req,
                                         v1::PushProgressReply* reply) {
  // It may wait (below): it holds one of the worker's slots for calls in flight, as streams do.
  uint64_t me = 0;
  absl::StatusOr<Auth::Stream> slot = AuthenticateStream(ctx, req->worker_id(), &me);
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  absl::MutexLock lock(&partial_mu_);
  // The cut push's own call may still be ending on another thread: wait for it (bounded).
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (pushing_.count(me) != 0 && !push_ended_.WaitWithDeadline(&partial_mu_, deadline)) {
  }
  const PartialPush* kept = FindPartialLocked(me, req->round(), req->payload_checksum());
  reply->set_received_bytes(kept != nullptr ? kept->bytes.size() : 0);
  return grpc::Status::OK;
}

grpc::Status MulocoService::Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req, v1::LeaveReply*) {
  absl::StatusOr<uint64_t> id = Authenticate(ctx, req->worker_id());
  if (!id.ok()) return ToGrpcStatus(id.status());
  auth_->Close(*id);
  return ToGrpcStatus(engine_->Leave(*id));
}

}  // namespace muloco
