// WorkerCore (see core.h).
#include "worker/core.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "common/log.h"
#include "common/run_config.h"

namespace muloco {
namespace {

// The run's layout from Join. It must hold `model` (the worker's own tensors, in any order);
// without one, it must be the built-in model of the run's config (GPT or LLaMA), tensor by tensor and in the
// same order (a user's model is trained by the Python package). A server that sends no
// layout runs the config's built-in model.
absl::StatusOr<ParamLayout> RunLayout(const v1::JoinResponse& joined, const ParamLayout& model) {
  const ParamLayout gpt = BuiltinLayout(joined.config().model());
  ParamLayout run = gpt;
  if (joined.layout().tensors_size() > 0) {
    absl::StatusOr<ParamLayout> sent = LayoutFromProto(joined.layout());
    if (!sent.ok()) return absl::InvalidArgumentError(absl::StrCat("server sent a bad layout: ", sent.status().message()));
    if (!model.empty()) {
      if (std::string d = LayoutDifference(*sent, model); !d.empty()) {
        return absl::FailedPreconditionError(absl::StrCat("this worker's model is not the run's: ", d));
      }
      return *std::move(sent);
    }
    std::string difference = LayoutDifference(*sent, gpt);
    for (size_t i = 0; difference.empty() && i < gpt.size(); ++i) {
      if ((*sent)[i].name != gpt[i].name) difference = absl::StrCat("tensor ", gpt[i].name, " is elsewhere in its order");
    }
    if (!difference.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the run's model is not the built-in model this worker trains (", difference,
          "); train it with muloco's Python package"));
    }
    run = *std::move(sent);
  } else if (!model.empty()) {  // a server that sends no layout runs the config's GPT
    if (std::string d = LayoutDifference(gpt, model); !d.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("this worker's model is not the run's: ", d));
    }
  }
  if (joined.num_params() != TotalParams(run)) {
    return absl::InvalidArgumentError("server's parameter count does not match its model");
  }
  return run;
}

}  // namespace

WorkerCore::WorkerCore(const WorkerOptions& o, Transport* transport, std::string token, ParamLayout model)
    : o_(o), client_(*transport), token_(std::move(token)), model_(std::move(model)) {
  name_ = o.name.empty() ? absl::StrCat("worker-", getpid()) : o.name;
  tag_ = absl::StrCat("worker ", SafeName(name_));
}

WorkerCore::~WorkerCore() = default;

bool WorkerCore::Nap(double s) {
  constexpr double kSlice = 0.05;  // how soon a stop signal is noticed
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  while (!Stopping()) {
    const double left = std::chrono::duration<double>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return true;
    client_.Pause(std::min(left, kSlice));
  }
  return false;
}

absl::Status WorkerCore::Join(double timeout_s) {
  const v1::ModelLayout model = model_.empty() ? v1::ModelLayout() : LayoutProto(model_);
  absl::StatusOr<v1::JoinResponse> joined = Retry([&] { return client_.Join(name_, token_, model); }, timeout_s);
  if (!joined.ok()) return joined.status();
  if (id_ != 0 && joined->config().SerializeAsString() != config_.SerializeAsString()) {
    return absl::FailedPreconditionError("the server now runs a different configuration");
  }
  if (absl::Status s = ValidateRunConfig(joined->config()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("server sent a bad config: ", s.message()));
  }
  absl::StatusOr<ParamLayout> layout = RunLayout(*joined, model_);
  if (!layout.ok()) {
    client_.Leave(joined->worker_id()).IgnoreError();  // never expected in a round it cannot train
    return layout.status();
  }
  layout_ = *std::move(layout);
  n_ = TotalParams(layout_);
  if (id_ == 0) join_index_ = joined->join_index();
  config_ = joined->config();
  joined_round_ = joined->round();
  max_staleness_ = joined->max_staleness();
  joined_checksum_ = joined->model_checksum();
  id_ = joined->worker_id();
  Logf(tag_.c_str(), "joined %s as %s (id %llu) at round %llu: %s%s", client_.Describe().c_str(), name_.c_str(),
       static_cast<unsigned long long>(id_.load()), static_cast<unsigned long long>(joined->round()),
       DescribeRunConfig(config_).c_str(),
       model_.empty() ? "" : absl::StrCat("; the model is this worker's own, ", layout_.size(), " tensors").c_str());
  return absl::OkStatus();
}

absl::Status WorkerCore::Resync() {
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<FetchedModel> m =
        Retry([&] { return client_.FetchModel(id_.load()); }, o_.retry_timeout_s);
    if (m.ok()) {
      pub_.Reset(*std::move(m));
      Count([&](WorkerStats& st) {
        ++st.model_fetches;
        st.round = pub_.round();
      });
      Logf(tag_.c_str(), "fetched model at round %llu (%zu parameters)", static_cast<unsigned long long>(pub_.round()),
           pub_.size());
      return absl::OkStatus();
    }
    if (m.status().code() != absl::StatusCode::kNotFound) return m.status();
    if (absl::Status s = Join(o_.retry_timeout_s); !s.ok()) return s;
  }
  return absl::UnavailableError("could not resync");
}

absl::Status WorkerCore::Begin() {
  const bool signmuon = KindsOf(config_).mode == RunMode::kSignMuon;
  uplink_ = std::make_unique<Uplink>(PlanSegments(CodecShapes(layout_), *ParseCodec(config_.uplink_codec())), signmuon,
                                     config_.ef_beta(), n_, config_.data_seed() + join_index_, o_.device);
  if (!uplink_->status().ok()) return uplink_->status();
  // Heartbeats for the current id (it changes on a rejoin) with the worker's counters; a
  // failure shows up on the next real call.
  heartbeat_ = std::make_unique<PeriodicThread>(o_.heartbeat_s, [this] {
    absl::StatusOr<uint32_t> told = client_.Heartbeat(id_.load(), ToReport(Stats()));
    if (told.ok()) {
      const uint32_t before = told_steps_.exchange(*told);
      if (*told != before && *told != 0) Logf(tag_.c_str(), "the server asks for %u inner steps a round", *told);
    }
    return true;
  });
  return absl::OkStatus();
}

void WorkerCore::Leave() {
  heartbeat_.reset();  // none after Leave
  if (id_ == 0) return;  // never joined
  if (absl::Status s = client_.Leave(id_.load()); !s.ok()) {
    LogWarn(tag_.c_str(), "Leave failed (%s); the server will evict this worker", s.ToString().c_str());
  }
}

uint32_t WorkerCore::InnerSteps() const {
  const uint32_t h = config_.inner_steps(), told = told_steps_.load();
  return told == 0 || told > h ? h : told;
}

Exchanged WorkerCore::Exchange(const std::string& payload, const PushedRound& p) {
  Exchanged x;
  const uint64_t round = p.round;
  const PushNote note{static_cast<float>(p.train_loss), p.steps};
  absl::Status pushed = Retry([&] { return client_.Push(id_.load(), round, payload, note); }, o_.retry_timeout_s);
  // An earlier attempt of this push got through (its reply was lost): the server has it.
  if (pushed.code() == absl::StatusCode::kAlreadyExists) pushed = absl::OkStatus();
  if (!pushed.ok()) {
    x.status = pushed;
    return x;
  }
  uplink_->Commit();
  // The replica applies every round from `round` (its version) in order, up to the one the
  // push counts in: `round` itself in a synchronous run, a later one in an asynchronous run
  // when rounds closed while it was on its way.
  const bool async = KindsOf(config_).async;
  for (uint64_t v = round;; ++v) {
    x.stage = Exchanged::kAwait;
    // A push counts at most max_staleness versions after its own (older: refused).
    const uint64_t versions = std::max<uint64_t>(kMaxVersionsToCount, max_staleness_.load() + 1);
    if (v > round + versions) {  // the push was lost (or never counted): start again
      x.status = absl::FailedPreconditionError(absl::StrCat("the push from version ", round, " counted in none of the ",
                                                            versions + 1, " rounds after it"));
      return x;
    }
    absl::StatusOr<RoundResult> result = Retry([&] { return client_.AwaitRound(id_.load(), v); }, o_.retry_timeout_s);
    if (!result.ok()) {
      x.status = result.status();
      return x;
    }
    x.result = *std::move(result);
    if (!x.result.landed.empty()) KeepUnlanded(payload, x.result);
    x.stage = Exchanged::kApply;
    x.status = pub_.Apply(x.result);
    if (!x.status.ok() || !async || x.result.mine || x.result.done) return x;
  }
}

void WorkerCore::KeepUnlanded(const std::string& payload, const RoundResult& r) {
  // Screening counted only part of the push: e keeps the rest.
  size_t cut = 0;
  for (const LandedRange& l : r.landed) cut += l.fraction < 1.0f;
  if (absl::Status s = uplink_->KeepUnlanded(payload, r.landed); !s.ok()) {
    LogWarn(tag_.c_str(), "round %llu: the server's screening note is unusable (%s)",
            static_cast<unsigned long long>(r.round), std::string(s.message()).c_str());
  } else {
    Logf(tag_.c_str(), "round %llu: the server's screening counted part of this push (%zu ranges); "
         "error feedback keeps the rest", static_cast<unsigned long long>(r.round), cut);
  }
}

absl::StatusOr<bool> WorkerCore::Settle(const Exchanged& x, const PushedRound& p, double wait_s) {
  const auto r = static_cast<unsigned long long>(p.round);
  if (!x.status.ok()) {
    // NOT_FOUND (this server does not know us: evicted, or restarted), FAILED_PRECONDITION
    // (stale round), a refused payload and an update that does not apply end in a resync;
    // anything else but the transient codes (retried in Exchange) is fatal.
    const absl::StatusCode c = x.status.code();
    const bool recoverable = c == absl::StatusCode::kNotFound || c == absl::StatusCode::kFailedPrecondition ||
                             (x.stage == Exchanged::kPush && c == absl::StatusCode::kInvalidArgument) ||
                             x.stage == Exchanged::kApply;
    if (!recoverable || Stopping()) return x.status;
    static constexpr const char* kWhat[] = {"push refused", "waiting for the round failed", "update not applied"};
    LogWarn(tag_.c_str(), "round %llu: %s (%s); resyncing", r, kWhat[x.stage], x.status.ToString().c_str());
    if (absl::Status s = Resync(); !s.ok()) return s;
    return false;
  }
  const RoundResult& u = x.result;
  Count([&](WorkerStats& st) {
    ++st.rounds_done;
    st.round = pub_.round();
    st.bytes_up += p.payload_bytes;
    st.bytes_down += u.payload.size();
    st.tokens += p.tokens;
    st.train_loss = p.train_loss;
    st.ef_residual_norm = uplink_->ResidualNorm();
    st.inner_step_seconds = p.train_s / (p.steps + p.extra);
    st.tokens_per_second = p.train_s > 0 ? p.tokens / p.train_s : 0;
    st.wait_seconds = wait_s;
  });
  wait_seconds_ += wait_s;
  const bool short_round = KindsOf(config_).mode != RunMode::kSignMuon && p.steps < config_.inner_steps();
  Logf(tag_.c_str(),
       "round %llu: train_loss %.4f, up %zu bytes (%s), down %zu bytes (%s), %u contributors, trained %.2f s, "
       "waited %.2f s, checksum %016llx ok%s",
       r, p.train_loss, p.payload_bytes, SizeNote(p.payload_bytes, 1, n_).c_str(), u.payload.size(),
       SizeNote(u.payload.size(), 1, n_).c_str(), u.contributors, p.train_s, wait_s,
       static_cast<unsigned long long>(pub_.checksum()),
       absl::StrCat(short_round ? absl::StrFormat(" (%u of %u inner steps)", p.steps, config_.inner_steps()) : "",
                    p.extra ? absl::StrFormat(" (+%u steps while the last push was in the air)", p.extra) : "")
           .c_str());
  return true;
}

void Flight::Launch(WorkerCore* core, const PushedRound& pushed, std::string payload) {
  pushed_ = pushed;
  future_ = std::async(std::launch::async, [core, pushed, payload = std::move(payload)] {
    return core->Exchange(payload, pushed);
  });
}

bool Flight::Due(uint32_t steps, uint32_t overlap_steps) const {
  if (!active()) return false;
  if (overlap_steps) return steps == overlap_steps;
  return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

Exchanged Flight::Land(double* waited_s) {
  const auto t0 = std::chrono::steady_clock::now();
  Exchanged x = future_.get();
  *waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return x;
}

}  // namespace muloco
