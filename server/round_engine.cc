// RoundEngine: see round_engine.h for the round rules.
#include "server/round_engine.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/log.h"
#include "kernels/sign.h"
#include "server/newton_schulz.h"

namespace muloco {

namespace {
EngineState Fresh(std::vector<float> params) {
  EngineState s;
  s.theta_true = params;
  s.theta_pub = std::move(params);
  return s;
}
}  // namespace

RoundEngine::RoundEngine(EngineOptions options, std::vector<float> initial_params, const Clock* clock)
    : RoundEngine(std::move(options), Fresh(std::move(initial_params)), clock) {}

RoundEngine::RoundEngine(EngineOptions options, EngineState state, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      num_params_(state.theta_pub.size()),
      downlink_(options_.downlink.empty() ? DenseSegments(num_params_) : options_.downlink),
      outer_(options_.outer, num_params_),
      theta_true_(std::move(state.theta_true)),
      theta_pub_(std::make_shared<const std::vector<float>>(std::move(state.theta_pub))),
      open_round_(state.open_round),
      sum_(num_params_, 0.0f),
      votes_(options_.aggregation == Aggregation::kVote ? num_params_ : 0, 0) {
  if (state.momentum.size() == outer_.momentum_buffer().size()) outer_.set_momentum_buffer(std::move(state.momentum));
  pub_checksum_ = ParamChecksum(theta_pub_->data(), num_params_);
  done_ = options_.total_rounds != 0 && open_round_ >= options_.total_rounds;
  // Ids differ across server restarts, so a worker holding an id from before a crash is
  // unknown here (and rejoins) instead of speaking for whoever got that number.
  next_worker_id_ = (std::random_device{}() & 0xffffffu) * (uint64_t{1} << 32) + 1;
}

RoundEngine::Joined RoundEngine::Join(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_worker_id_++;
  members_[id] = Member{name, clock_->Now()};
  if (pushed_.empty()) expected_.insert(id);
  const uint64_t join_index = stats_.joins++;
  Logf("server", "worker %llu (%s) joined at round %llu; %zu live", static_cast<unsigned long long>(id),
       name.c_str(), static_cast<unsigned long long>(open_round_), members_.size());
  return Joined{id, open_round_, pub_checksum_, join_index};
}

absl::Status RoundEngine::Heartbeat(uint64_t worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(worker_id);
  if (it == members_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  it->second.last_seen = clock_->Now();
  return absl::OkStatus();
}

absl::Status RoundEngine::Leave(uint64_t worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!members_.count(worker_id)) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  ForgetLocked(worker_id);
  ++stats_.leaves;
  Logf("server", "worker %llu left; %zu live", static_cast<unsigned long long>(worker_id), members_.size());
  MaybeCloseLocked();
  return absl::OkStatus();
}

void RoundEngine::ForgetLocked(uint64_t worker_id) {
  members_.erase(worker_id);
  expected_.erase(worker_id);
}

absl::Status RoundEngine::Push(uint64_t worker_id, uint64_t round, absl::string_view payload) {
  std::lock_guard<std::mutex> lock(mu_);
  auto member = members_.find(worker_id);
  if (member == members_.end()) {
    ++stats_.rejected_unknown_worker;
    return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  }
  member->second.last_seen = clock_->Now();
  if (done_ || round != open_round_) {
    ++stats_.rejected_wrong_round;
    return absl::FailedPreconditionError(
        done_ ? "the run is over"
              : absl::StrCat("push for round ", round, " but round ", open_round_, " is open; fetch the model"));
  }
  if (pushed_.count(worker_id)) {
    ++stats_.rejected_duplicate;
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker_id, " already pushed round ", round));
  }
  const absl::Status s = options_.aggregation == Aggregation::kVote
                             ? VoteAccumulate(payload, num_params_, votes_.data())
                             : DecodeAccumulate(payload, num_params_, sum_.data());
  if (!s.ok()) {
    ++stats_.rejected_bad_payload;
    return s;
  }
  pushed_.insert(worker_id);
  if (first_push_time_ < 0) first_push_time_ = clock_->Now();
  ++stats_.pushes_accepted;
  stats_.bytes_up += payload.size();
  round_bytes_up_ += payload.size();
  MaybeCloseLocked();
  return absl::OkStatus();
}

void RoundEngine::MaybeCloseLocked() {
  if (done_ || pushed_.empty() || pushed_.size() < std::max<size_t>(1, options_.min_quorum)) return;
  const bool all_in = std::includes(pushed_.begin(), pushed_.end(), expected_.begin(), expected_.end());
  const bool deadline = clock_->Now() >= first_push_time_ + options_.round_timeout_s;
  if (all_in || deadline) CloseRoundLocked();
}

void RoundEngine::CloseRoundLocked() {
  const size_t n = num_params_;
  if (options_.aggregation == Aggregation::kVote) {
    kernels::cpu::VoteSign(votes_.data(), n, sum_.data());  // g = sign(Σ s_k), ties 0
    for (const MatrixRange& m : options_.polar) PolarNewtonSchulz(sum_.data() + m.offset, m.rows, m.cols, options_.polar_steps);
    std::fill(votes_.begin(), votes_.end(), 0);
  } else {
    const float inv = 1.0f / static_cast<float>(pushed_.size());
    for (size_t i = 0; i < n; ++i) sum_[i] *= inv;  // now the mean pseudo-gradient
  }
  outer_.Step(theta_true_.data(), sum_.data(), n);

  // down = C(θ_true − θ_pub) (reusing sum_), then θ_pub += decode(down), as every worker
  // will. What the compression leaves out stays in θ_true − θ_pub for later rounds.
  const std::vector<float>& pub = *theta_pub_;
  for (size_t i = 0; i < n; ++i) sum_[i] = theta_true_[i] - pub[i];
  auto payload = std::make_shared<const std::string>(Compress(downlink_, nullptr, 1.0f, sum_.data()));
  auto next_pub = std::make_shared<std::vector<float>>(pub);
  absl::Status applied = DecodeAccumulate(*payload, n, next_pub->data());
  if (!applied.ok()) {
    // Our own encoder produced something our decoder rejects: a bug, not a peer fault.
    Logf("server", "FATAL: downlink payload rejected: %s", applied.ToString().c_str());
    std::abort();
  }
  theta_pub_ = std::move(next_pub);
  pub_checksum_ = ParamChecksum(theta_pub_->data(), n);

  RoundUpdate update;
  update.round = open_round_;
  update.next_round = open_round_ + 1;
  update.checksum = pub_checksum_;
  update.contributors = static_cast<uint32_t>(pushed_.size());
  update.bytes_up = round_bytes_up_;
  update.done = options_.total_rounds != 0 && update.next_round >= options_.total_rounds;
  update.payload = std::move(payload);
  history_.push_back(update);
  while (history_.size() > std::max<size_t>(1, options_.keep_rounds)) history_.pop_front();

  ++stats_.rounds_closed;
  stats_.bytes_down += update.payload->size();
  done_ = update.done;
  open_round_ = update.next_round;
  if (options_.checkpoint && options_.checkpoint_every &&
      (done_ || open_round_ % options_.checkpoint_every == 0)) {
    options_.checkpoint(ExportStateLocked());
  }
  // Logged after the checkpoint: with checkpoints every round, a round in the log is a round
  // a restarted server still has.
  const double dense = static_cast<double>(PayloadBytes(DenseSegments(n)));
  Logf("server",
       "round %llu closed: %u contributors, %zu expected, up %llu bytes (%.1fx smaller than dense fp32), "
       "down %zu bytes (%.1fx), checksum %016llx%s",
       static_cast<unsigned long long>(update.round), update.contributors, expected_.size(),
       static_cast<unsigned long long>(update.bytes_up), dense * update.contributors / update.bytes_up,
       update.payload->size(), dense / update.payload->size(), static_cast<unsigned long long>(update.checksum),
       update.done ? " (final)" : "");

  pushed_.clear();
  round_bytes_up_ = 0;
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  first_push_time_ = -1;
  expected_.clear();
  for (const auto& [id, m] : members_) expected_.insert(id);
  round_closed_.notify_all();
}

absl::StatusOr<RoundUpdate> RoundEngine::AwaitRound(uint64_t round, double wait_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto find = [&]() -> const RoundUpdate* {
    for (const RoundUpdate& u : history_)
      if (u.round == round) return &u;
    return nullptr;
  };
  if (round > open_round_ || (round == open_round_ && done_)) {
    return absl::FailedPreconditionError(absl::StrCat("round ", round, " is not open (open: ", open_round_, ")"));
  }
  round_closed_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return open_round_ > round; });
  if (open_round_ <= round) return absl::DeadlineExceededError(absl::StrCat("round ", round, " still open"));
  if (const RoundUpdate* u = find()) return *u;
  return absl::FailedPreconditionError(absl::StrCat("round ", round, " is too old; fetch the model"));
}

ModelSnapshot RoundEngine::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ModelSnapshot{open_round_, pub_checksum_, theta_pub_};
}

void RoundEngine::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->Now();
  for (auto it = members_.begin(); it != members_.end();) {
    if (now - it->second.last_seen > options_.heartbeat_timeout_s) {
      Logf("server", "evicting worker %llu (%s): silent for %.1f s", static_cast<unsigned long long>(it->first),
           it->second.name.c_str(), now - it->second.last_seen);
      expected_.erase(it->first);
      it = members_.erase(it);
      ++stats_.evictions;
    } else {
      ++it;
    }
  }
  MaybeCloseLocked();
}

void RoundEngine::CountMalformedPush() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.rejected_bad_payload;
}

void RoundEngine::WakeAll() { round_closed_.notify_all(); }

EngineState RoundEngine::ExportStateLocked() const {
  return EngineState{open_round_, theta_true_, *theta_pub_, outer_.momentum_buffer()};
}

EngineState RoundEngine::ExportState() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ExportStateLocked();
}

EngineStats RoundEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.live_workers = members_.size();
  s.open_round = open_round_;
  s.done = done_;
  return s;
}

}  // namespace muloco
