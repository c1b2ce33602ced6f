// ModelWorker (see model_worker.h).
#include "worker/model_worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"

namespace muloco {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ModelWorker::ModelWorker(WorkerOptions o, Transport* transport, std::string token, ParamLayout model)
    : o_(std::move(o)), core_(o_, transport, std::move(token), std::move(model)) {}

ModelWorker::~ModelWorker() {
  if (flight_.active()) core_.transport().CancelAwaits();
  flight_.Drop();
}

absl::Status ModelWorker::Join() {
  if (absl::Status s = core_.Join(o_.connect_timeout_s); !s.ok()) return s;
  if (absl::Status s = core_.Begin(); !s.ok()) return s;
  if (absl::Status s = core_.Resync(); !s.ok()) return s;
  delta_.assign(core_.num_params(), 0.0f);
  checksum_ = core_.pub().checksum();
  return absl::OkStatus();
}

uint64_t ModelWorker::round() const {
  return flight_.active() ? flight_.pushed().round + 1 : core_.pub().round();
}

absl::Status ModelWorker::Check(const Tensors& t) const {
  if (t.size() != layout().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("one tensor per tensor of the run's layout: ", layout().size(), ", not ", t.size()));
  }
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == nullptr) return absl::InvalidArgumentError(absl::StrCat("tensor ", layout()[i].name, " is null"));
  }
  return absl::OkStatus();
}

void ModelWorker::Gather(const Tensors& t, std::vector<float>* out) const {
  out->resize(num_params());
  for (size_t i = 0; i < t.size(); ++i) std::copy_n(t[i], layout()[i].numel, out->data() + layout()[i].offset);
}

void ModelWorker::Scatter(const std::vector<float>& from, const Tensors& t) const {
  for (size_t i = 0; i < t.size(); ++i) std::copy_n(from.data() + layout()[i].offset, layout()[i].numel, t[i]);
}

absl::Status ModelWorker::ReadModel(const Tensors& t) const {
  if (absl::Status s = Check(t); !s.ok()) return s;
  if (flight_.active()) return absl::FailedPreconditionError("a push is in flight: land it first");
  Scatter(core_.pub().params(), t);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ModelWorker::Encode(const Tensors& t, uint64_t round) {
  Gather(t, &delta_);
  const std::vector<float>& pub = core_.pub().params();
  for (size_t i = 0; i < delta_.size(); ++i) {
    delta_[i] = pub[i] - delta_[i];
    if (!(std::abs(delta_[i]) <= kMaxAbsValue)) {
      return absl::OutOfRangeError(absl::StrCat("round ", round,
                                                ": the update is non-finite or out of range: lower the learning rate"));
    }
  }
  return core_.uplink().Encode(delta_.data(), round);
}

absl::StatusOr<SyncResult> ModelWorker::Sync(const Tensors& t, const SyncReport& r) {
  if (absl::Status s = Check(t); !s.ok()) return s;
  if (flight_.active()) {
    absl::StatusOr<bool> landed = Land(t);
    if (!landed.ok()) return landed.status();
    if (!*landed) {  // the flight's push was refused: this round's work went with it
      SyncResult out;
      out.round = core_.pub().round();
      out.done = done();
      out.checksum = checksum_;
      return out;
    }
  }
  SyncResult out;
  const uint64_t round = core_.pub().round();
  if (round >= config().total_rounds()) {  // nothing left to push: the tensors hold the final model
    out.round = round;
    out.done = true;
    out.checksum = checksum_;
    return out;
  }
  absl::StatusOr<std::string> payload = Encode(t, round);
  if (!payload.ok()) return payload.status();
  const PushedRound pushed{round, payload->size(), r.train_loss, r.train_seconds,
                           r.steps ? r.steps : config().inner_steps(), r.tokens};
  if (o_.overlap) {
    Gather(t, &pushed_);
    steps_since_push_ = 0;
    flight_.Launch(&core_, pushed, *std::move(payload));
    out.round = round + 1;
    out.applied = out.in_flight = true;
    out.done = out.round >= config().total_rounds();
    out.checksum = checksum_;
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Exchanged x = core_.Exchange(*payload, pushed);
  absl::StatusOr<bool> applied = core_.Settle(x, pushed, Since(t0));
  if (!applied.ok()) return applied.status();
  Scatter(core_.pub().params(), t);
  checksum_ = core_.pub().checksum();
  out.round = core_.pub().round();
  out.applied = *applied;
  out.done = done();
  out.contributors = *applied ? x.result.contributors : 0;
  out.checksum = checksum_;
  return out;
}

bool ModelWorker::LandDue() {
  if (!flight_.active()) return false;
  return flight_.Due(++steps_since_push_, o_.overlap_steps);
}

absl::StatusOr<bool> ModelWorker::Land(const Tensors& t) {
  if (absl::Status s = Check(t); !s.ok()) return s;
  if (!flight_.active()) return true;
  double waited_s = 0;
  const Exchanged x = flight_.Land(&waited_s);
  absl::StatusOr<bool> applied = core_.Settle(x, flight_.pushed(), waited_s);
  if (!applied.ok()) return applied.status();
  const std::vector<float>& pub = core_.pub().params();
  checksum_ = core_.pub().checksum();
  if (!*applied || done()) {
    Scatter(pub, t);  // dropped: the server's model; the run's end: exactly the final model
    return *applied;
  }
  for (size_t i = 0; i < t.size(); ++i) {
    const ParamInfo& p = layout()[i];
    for (size_t j = 0; j < p.numel; ++j) t[i][j] += pub[p.offset + j] - pushed_[p.offset + j];
  }
  return true;
}

void ModelWorker::Leave(const Tensors* t) {
  if (flight_.active()) {
    if (t != nullptr && Check(*t).ok()) {
      Land(*t).IgnoreError();  // Settle logged what went wrong
    } else {
      core_.transport().CancelAwaits();
      flight_.Drop();
    }
  }
  core_.Leave();
}

}  // namespace muloco
