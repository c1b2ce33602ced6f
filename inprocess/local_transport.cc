// LocalTransport (see local_transport.h).
#include "inprocess/local_transport.h"

#include "common/worker_stats.h"

namespace muloco {

absl::StatusOr<v1::JoinResponse> LocalTransport::Join(const std::string& name, const std::string& token,
                                                      const v1::ModelLayout&) {
  const RoundEngine::Joined j = engine_->Join(name);
  v1::JoinResponse r;
  r.set_worker_id(j.worker_id);
  r.set_round(j.round);
  *r.mutable_config() = config_;
  if (layout_.tensors_size() > 0) *r.mutable_layout() = layout_;
  r.set_num_params(engine_->num_params());
  r.set_model_checksum(j.checksum);
  r.set_join_index(j.join_index);
  r.set_max_staleness(engine_->max_staleness());
  return r;
}

absl::StatusOr<FetchedModel> LocalTransport::FetchModel(uint64_t worker_id) {
  if (!engine_->IsMember(worker_id)) return absl::NotFoundError("unknown worker: join again");
  const ModelSnapshot s = engine_->Snapshot();
  ++fetches_;
  return FetchedModel{s.round, s.checksum, *s.params};
}

absl::Status LocalTransport::Push(uint64_t worker_id, uint64_t round, const std::string& payload,
                                  const PushNote& note) {
  return engine_->Push(worker_id, round, payload, note.inner_steps);
}

absl::StatusOr<RoundResult> LocalTransport::AwaitRound(uint64_t worker_id, uint64_t round) {
  constexpr double kPollS = 0.2;  // how soon CancelAwaits and an eviction are noticed
  for (;;) {
    if (cancelled_) return absl::CancelledError("AwaitRound cancelled: the worker is stopping");
    if (!engine_->IsMember(worker_id)) return absl::NotFoundError("unknown worker: join again");
    absl::StatusOr<RoundUpdate> u = engine_->AwaitRound(round, kPollS);
    if (u.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
    if (!u.ok()) return u.status();
    RoundResult r{u->round, u->next_round, u->checksum, u->contributors, u->done, *u->payload, {}};
    r.mine = u->pushed != nullptr && u->pushed->count(worker_id) > 0;
    if (u->landed != nullptr) {
      auto mine = u->landed->find(worker_id);
      if (mine != u->landed->end()) r.landed = mine->second;
    }
    return r;
  }
}

absl::StatusOr<uint32_t> LocalTransport::Heartbeat(uint64_t worker_id, const v1::WorkerReport& report) {
  if (absl::Status s = engine_->Report(worker_id, FromReport(report)); !s.ok()) return s;
  return engine_->TellInnerSteps(worker_id);
}

absl::Status LocalTransport::Leave(uint64_t worker_id) { return engine_->Leave(worker_id); }

}  // namespace muloco
