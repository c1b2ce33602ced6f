// MulocoService: gRPC calls -> RoundEngine calls.
#include "server/service.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/grpc_status.h"

namespace muloco {

MulocoService::MulocoService(RoundEngine* engine, v1::RunConfig config, ServiceOptions options)
    : engine_(engine),
      config_(std::move(config)),
      options_(options),
      max_payload_bytes_(options.max_payload_bytes ? options.max_payload_bytes
                                                   : PayloadBytes(DenseSegments(engine->num_params()))) {}

WireStats MulocoService::Wire() const {
  return WireStats{updates_sent_.load(), update_bytes_sent_.load(), model_fetches_.load(), model_bytes_sent_.load()};
}

grpc::Status MulocoService::Join(grpc::ServerContext*, const v1::JoinRequest* req, v1::JoinResponse* resp) {
  if (req->protocol_version() != 1) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("protocol version ", req->protocol_version(), " unsupported; this server speaks 1"));
  }
  if (req->name().size() > 256) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name longer than 256 bytes");
  RoundEngine::Joined j = engine_->Join(req->name());
  resp->set_worker_id(j.worker_id);
  resp->set_round(j.round);
  *resp->mutable_config() = config_;
  resp->set_num_params(engine_->num_params());
  resp->set_model_checksum(j.checksum);
  resp->set_join_index(j.join_index);
  return grpc::Status::OK;
}

grpc::Status MulocoService::FetchModel(grpc::ServerContext* ctx, const v1::FetchModelRequest* req,
                                       grpc::ServerWriter<v1::ModelChunk>* writer) {
  if (absl::Status s = engine_->Heartbeat(req->worker_id()); !s.ok()) return ToGrpcStatus(s);
  ModelSnapshot snap = engine_->Snapshot();
  const size_t n = snap.params->size();
  if (req->offset() > n) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("offset ", req->offset(), " > ", n));
  }
  const size_t per_chunk = std::max<size_t>(1, options_.chunk_bytes / sizeof(float));
  size_t offset = req->offset();
  do {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    const size_t count = std::min(per_chunk, n - offset);
    v1::ModelChunk chunk;
    chunk.set_round(snap.round);
    chunk.set_num_params(n);
    chunk.set_model_checksum(snap.checksum);
    chunk.set_offset(offset);
    chunk.set_data(reinterpret_cast<const char*>(snap.params->data() + offset), count * sizeof(float));
    chunk.set_chunk_checksum(Checksum64(chunk.data().data(), chunk.data().size()));
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
    model_bytes_sent_ += count * sizeof(float);
    offset += count;
  } while (offset < n);
  ++model_fetches_;
  return grpc::Status::OK;
}

grpc::Status MulocoService::PushUpdate(grpc::ServerContext*, grpc::ServerReader<v1::UpdateChunk>* reader,
                                       v1::PushReply* reply) {
  auto bad = [this](const std::string& m) {
    engine_->CountMalformedPush();
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, m);
  };
  v1::UpdateChunk chunk;
  if (!reader->Read(&chunk)) return bad("empty push stream");
  const uint64_t worker = chunk.worker_id(), round = chunk.round(), total = chunk.total_bytes();
  if (total > max_payload_bytes_) {
    return bad(absl::StrCat("declared payload of ", total, " bytes exceeds the limit of ", max_payload_bytes_));
  }
  std::string payload;
  payload.reserve(total);
  do {
    if (chunk.worker_id() != worker || chunk.round() != round) return bad("chunks of one push disagree on worker/round");
    if (chunk.data().size() > total - payload.size()) return bad(absl::StrCat("push exceeds its declared ", total, " bytes"));
    payload.append(chunk.data());
  } while (reader->Read(&chunk));
  if (payload.size() != total) {
    return bad(absl::StrCat("push ended after ", payload.size(), " of ", total, " declared bytes"));
  }
  if (absl::Status s = engine_->Push(worker, round, payload); !s.ok()) return ToGrpcStatus(s);
  reply->set_accepted_bytes(payload.size());
  return grpc::Status::OK;
}

grpc::Status MulocoService::AwaitRound(grpc::ServerContext* ctx, const v1::AwaitRoundRequest* req,
                                       grpc::ServerWriter<v1::RoundChunk>* writer) {
  absl::StatusOr<RoundUpdate> update;
  for (;;) {
    // Waiting counts as liveness; an unknown worker (evicted, or this server restarted from a
    // checkpoint and lost its push) hears NOT_FOUND now instead of waiting for a round that
    // may never close.
    if (absl::Status s = engine_->Heartbeat(req->worker_id()); !s.ok()) return ToGrpcStatus(s);
    update = engine_->AwaitRound(req->round(), 0.25);
    if (update.status().code() != absl::StatusCode::kDeadlineExceeded) break;
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down");
  }
  if (!update.ok()) return ToGrpcStatus(update.status());
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
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
    update_bytes_sent_ += count;
    offset += count;
  } while (offset < payload.size());
  ++updates_sent_;
  return grpc::Status::OK;
}

grpc::Status MulocoService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                      v1::HeartbeatReply* reply) {
  if (absl::Status s = engine_->Heartbeat(req->worker_id()); !s.ok()) return ToGrpcStatus(s);
  reply->set_round(engine_->Stats().open_round);
  return grpc::Status::OK;
}

grpc::Status MulocoService::Leave(grpc::ServerContext*, const v1::LeaveRequest* req, v1::LeaveReply*) {
  return ToGrpcStatus(engine_->Leave(req->worker_id()));
}

}  // namespace muloco
