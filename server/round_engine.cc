// RoundEngine: see round_engine.h for the round rules.
#include "server/round_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/log.h"
#include "kernels/newton_schulz.h"
#include "kernels/subset.h"

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
      close_threads_(options_.close_threads > 0 ? options_.close_threads
                                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      outer_(options_.outer, num_params_),
      theta_true_(std::move(state.theta_true)),
      theta_pub_(std::make_shared<const std::vector<float>>(std::move(state.theta_pub))),
      open_round_(state.open_round),
      sum_(num_params_, 0.0f),
      screen_(options_.screen),
      votes_(options_.aggregation == Aggregation::kVote ? num_params_ : 0, 0) {
  if (state.momentum.size() == outer_.momentum_buffer().size()) outer_.set_momentum_buffer(std::move(state.momentum));
  pub_checksum_ = ParamChecksum(theta_pub_->data(), num_params_);
  round_open_time_ = clock_->Now();
  done_ = options_.total_rounds != 0 && open_round_ >= options_.total_rounds;
  // Ids differ across server restarts, so a worker holding an id from before a crash is
  // unknown here (and rejoins) instead of speaking for whoever got that number.
  next_worker_id_ = (std::random_device{}() & 0xffffffu) * (uint64_t{1} << 32) + 1;
}

RoundEngine::Joined RoundEngine::Join(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_worker_id_++;
  if (pushed_.empty() && !AnyProvenLocked()) expected_.insert(id);  // cold start
  Member m;
  m.name = name;
  m.last_seen = clock_->Now();
  m.first_round = open_round_ + (summed_norms_.empty() ? 0 : 1);  // see summing on arrival
  members_[id] = std::move(m);
  const uint64_t join_index = stats_.joins++;
  Logf("server", "worker %llu (%s) joined at round %llu; %zu live", static_cast<unsigned long long>(id),
       members_[id].name.c_str(), static_cast<unsigned long long>(open_round_), members_.size());
  return Joined{id, open_round_, pub_checksum_, join_index};
}

absl::Status RoundEngine::Heartbeat(uint64_t worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(worker_id);
  if (it == members_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  it->second.last_seen = clock_->Now();
  return absl::OkStatus();
}

absl::Status RoundEngine::Report(uint64_t worker_id, const WorkerStats& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(worker_id);
  if (it == members_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  it->second.last_seen = clock_->Now();
  it->second.stats = stats;
  it->second.reported = true;
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

bool RoundEngine::AnyProvenLocked() const {
  for (const auto& [id, m] : members_)
    if (m.proven) return true;
  return false;
}

void RoundEngine::ForgetLocked(uint64_t worker_id) {
  members_.erase(worker_id);
  expected_.erase(worker_id);
}

absl::Status RoundEngine::Push(uint64_t worker_id, uint64_t round, absl::string_view payload) {
  // kMean: the payload is validated and its Δ's norm computed before taking the lock, so
  // concurrent pushes decode on all cores (each holds one segment's values, not a model).
  const bool vote = options_.aggregation == Aggregation::kVote;
  absl::StatusOr<double> norm = 0.0;
  if (!vote) {
    const absl::Status plan = options_.uplink.empty() ? absl::OkStatus() : CheckPlan(payload, options_.uplink);
    norm = plan.ok() ? DecodedNorm(payload, num_params_) : plan;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto member = members_.find(worker_id);
  if (member == members_.end()) {
    ++stats_.rejected_unknown_worker;
    return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  }
  member->second.last_seen = clock_->Now();
  Member& m = member->second;
  // kMean: the result of the check above. kVote: validates while adding the signs to `counts`.
  auto validate = [&](int32_t* counts) -> absl::Status {
    if (!vote) return norm.status();
    if (!options_.uplink.empty()) {
      if (absl::Status s = CheckPlan(payload, options_.uplink); !s.ok()) return s;
    }
    return VoteAccumulate(payload, num_params_, counts);
  };
  if (!done_ && round + 1 == m.next_round) {
    // Its push of this round was accepted and closed the round; the reply was lost.
    ++stats_.rejected_duplicate;
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker_id, " already pushed round ", round, " (closed)"));
  }
  if (done_ || round != open_round_) {
    ++stats_.rejected_wrong_round;
    // A valid update for the round that just closed proves the worker is training: it is
    // expected from the next round on, so a slower worker is not left racing every close.
    // Each missed round doubles the wait before a late push may prove it again, so an id
    // that proves itself and then never pushes in time holds few rounds open.
    if (!done_ && round + 1 == open_round_ && open_round_ >= m.reprove_after) {
      std::vector<int32_t> counts(vote ? num_params_ : 0);
      if (absl::Status s = validate(counts.data()); !s.ok()) {
        --stats_.rejected_wrong_round;  // counted as what it is
        ++stats_.rejected_bad_payload;
        return s;
      }
      m.proven = true;
    }
    return absl::FailedPreconditionError(
        done_ ? "the run is over"
              : absl::StrCat("push for round ", round, " but round ", open_round_, " is open; fetch the model"));
  }
  if (pushed_.count(worker_id)) {
    ++stats_.rejected_duplicate;
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker_id, " already pushed round ", round));
  }
  if (const absl::Status s = validate(votes_.data()); !s.ok()) {
    ++stats_.rejected_bad_payload;
    return s;
  }
  if (round < m.first_round && pushed_.size() >= std::max<size_t>(1, options_.min_quorum)) {
    // kMean only (votes are never summed on arrival): it joined after this round's first sum
    // on arrival, and the round has its quorum, so the bound did not count it: its norm could
    // lower the threshold below one already summed. Its valid push proves it, as a late one does.
    ++stats_.rejected_wrong_round;
    m.proven = true;
    return absl::FailedPreconditionError(absl::StrCat("joined round ", round, " after its first updates were summed; ",
                                                      "push from round ", m.first_round, " on (fetch the model)"));
  }
  bool sum_now = false;  // kMean: screening cannot touch it, so it is summed instead of held
  if (!vote) {
    std::vector<double> norms = RoundNormsLocked();
    norms.push_back(*norm);
    sum_now = *norm <= SafeNormLocked(norms, pushed_.size() + 1, UnpushedLocked() - 1);
    auto full = [&] { return pending_bytes_ + payload.size() > options_.max_round_bytes; };
    if (!sum_now && full()) SumSafeLocked();  // held pushes it clears free their room
    if (!sum_now && full()) {
      ++stats_.rejected_round_full;
      return absl::ResourceExhaustedError(absl::StrCat("this round already holds ", pending_bytes_,
                                                       " payload bytes; retry in the next round"));
    }
  }
  if (sum_now) {
    SumPayloads({WeightedPayload{payload, 1.0f}}, num_params_, sum_.data(), close_threads_);
    summed_norms_.push_back(*norm);
    ++stats_.summed_on_arrival;
  } else if (!vote) {
    pending_.push_back(Pending{worker_id, m.name, std::string(payload), *norm});
    pending_bytes_ += payload.size();
    stats_.held_bytes_peak = std::max(stats_.held_bytes_peak, pending_bytes_);
  }
  m.proven = true;
  m.misses = 0;
  m.next_round = round + 1;
  pushed_.insert(worker_id);
  if (first_push_time_ < 0) first_push_time_ = clock_->Now();
  ++stats_.pushes_accepted;
  stats_.bytes_up += payload.size();
  round_bytes_up_ += payload.size();
  MaybeCloseLocked();
  return absl::OkStatus();
}

size_t RoundEngine::UnpushedLocked() const {
  size_t n = 0;
  for (const auto& [id, m] : members_) n += !pushed_.count(id);
  return n;
}

std::vector<double> RoundEngine::RoundNormsLocked() const {
  std::vector<double> norms = summed_norms_;
  for (const Pending& p : pending_) norms.push_back(p.norm);
  return norms;
}

double RoundEngine::SafeNormLocked(const std::vector<double>& norms, size_t pushed, size_t unknown_members) const {
  // Besides the members yet to push, newcomers may push while the round lacks its quorum
  // (after that they wait for the next round: see Push), at most one per missing push.
  const size_t quorum = std::max<size_t>(1, options_.min_quorum);
  return screen_.SafeBound(norms, unknown_members + (pushed < quorum ? quorum - pushed : 0));
}

void RoundEngine::SumSafeLocked() {
  if (pending_.empty()) return;
  const double safe = SafeNormLocked(RoundNormsLocked(), pushed_.size(), UnpushedLocked());
  auto summed = [&](const Pending& p) { return p.norm <= safe; };
  std::vector<WeightedPayload> now;
  for (const Pending& p : pending_)
    if (summed(p)) now.push_back({p.payload, 1.0f});
  if (now.empty()) return;
  SumPayloads(now, num_params_, sum_.data(), close_threads_);
  for (const Pending& p : pending_) {
    if (!summed(p)) continue;
    summed_norms_.push_back(p.norm);
    pending_bytes_ -= p.payload.size();
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), summed), pending_.end());
}

void RoundEngine::MaybeCloseLocked() {
  if (done_ || pushed_.empty()) return;
  SumSafeLocked();  // a leave, an eviction or a push may have made held pushes safe
  size_t expected_in = 0;
  for (uint64_t id : expected_) expected_in += pushed_.count(id);
  const double now = clock_->Now();
  if (straggler_clock_ < 0 && 2 * expected_in >= expected_.size()) straggler_clock_ = now;
  if (pushed_.size() < std::max<size_t>(1, options_.min_quorum)) return;
  const bool all_in = expected_in == expected_.size();
  const bool deadline = (straggler_clock_ >= 0 && now >= straggler_clock_ + options_.round_timeout_s) ||
                        now >= first_push_time_ + kBackstopTimeouts * options_.round_timeout_s;
  if (all_in || deadline) CloseRoundLocked();
}

void RoundEngine::CountScreenLocked(const std::string& name, bool rejected) {
  const bool known = stats_.screened.count(name) || stats_.screened.size() < kMaxScreenLabels;
  ScreenCounts& c = stats_.screened[known ? name : "other"];
  ++(rejected ? c.rejected : c.clipped);
}

size_t RoundEngine::SumScreenedLocked() {
  const double limit = screen_.Threshold(RoundNormsLocked());
  std::vector<double> summed = std::move(summed_norms_);
  std::vector<WeightedPayload> kept;  // validated at Push
  std::string report;
  for (const Pending& p : pending_) {
    if (p.norm <= limit) {
      kept.push_back({p.payload, 1.0f});
      summed.push_back(p.norm);
      continue;
    }
    const bool reject = screen_.mode() == Robust::kReject;
    CountScreenLocked(p.name, reject);
    absl::StrAppend(&report, report.empty() ? "" : "; ", p.name, " (", p.worker_id, ") ", reject ? "left out" : "clipped",
                    ": norm ", absl::SixDigits(p.norm), " > ", absl::SixDigits(limit));
    if (reject) continue;
    kept.push_back({p.payload, static_cast<float>(limit / p.norm)});
    summed.push_back(limit);
  }
  SumPayloads(kept, num_params_, sum_.data(), close_threads_);
  if (!report.empty()) {
    LogWarn("server", "round %llu screening (%s): %s", static_cast<unsigned long long>(open_round_),
            screen_.mode() == Robust::kReject ? "reject" : "clip", report.c_str());
  }
  const size_t count = summed.size();
  screen_.Remember(std::move(summed));
  pending_.clear();
  pending_bytes_ = 0;
  summed_norms_.clear();
  return count;
}

std::shared_ptr<const std::string> RoundEngine::PublishLocked() {
  const size_t n = num_params_;
  // down = C(θ_true − θ_pub) (reusing sum_), then θ_pub += decode(down), as every worker
  // will. What the compression leaves out stays in θ_true − θ_pub for later rounds.
  const std::vector<float>& pub = *theta_pub_;
  for (size_t i = 0; i < n; ++i) sum_[i] = theta_true_[i] - pub[i];
  const uint64_t seed = kernels::SplitMix64(open_round_ ^ 0xD0D0D0D0ULL);  // `keep` subsets: new every round
  auto payload =
      std::make_shared<const std::string>(Compress(downlink_, nullptr, 1.0f, sum_.data(), seed, close_threads_));
  // θ_pub's buffer of two rounds ago, when no reader holds it any more: copying into memory
  // already mapped spares the page faults of a fresh model-sized allocation every round.
  std::shared_ptr<std::vector<float>> next_pub;
  if (spare_pub_ != nullptr && spare_pub_.use_count() == 1) {
    next_pub = std::move(spare_pub_);
    *next_pub = pub;
  } else {
    next_pub = std::make_shared<std::vector<float>>(pub);
  }
  if (const absl::Status applied = DecodeAccumulate(*payload, n, next_pub->data()); !applied.ok()) {
    // θ_true left the range a payload may carry (or our encoder has a bug). Discard the
    // step rather than stop serving: the global model stays θ_pub, the momentum restarts.
    LogError("server", "round %llu downlink failed its check (%s); discarding the step, outer state reset",
             static_cast<unsigned long long>(open_round_), applied.ToString().c_str());
    ++stats_.downlink_resets;
    theta_true_ = pub;
    outer_.set_momentum_buffer(std::vector<float>(outer_.momentum_buffer().size(), 0.0f));
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    payload = std::make_shared<const std::string>(Compress(downlink_, nullptr, 1.0f, sum_.data()));
    return payload;  // θ_pub unchanged: the zero update decodes to exactly nothing
  }
  spare_pub_ = std::const_pointer_cast<std::vector<float>>(theta_pub_);
  theta_pub_ = std::move(next_pub);
  pub_checksum_ = ParamChecksum(theta_pub_->data(), n);
  return payload;
}

void RoundEngine::CloseRoundLocked() {
  const auto close_start = std::chrono::steady_clock::now();
  const size_t n = num_params_;
  size_t contributors = pushed_.size();
  if (options_.aggregation == Aggregation::kVote) {
    VoteSign(votes_.data(), n, sum_.data());  // g = sign(Σ s_k), ties 0
    for (const MatrixRange& m : options_.polar) PolarNewtonSchulz(sum_.data() + m.offset, m.rows, m.cols, options_.polar_steps);
    const float factor = options_.vote_lr_factor ? static_cast<float>(options_.vote_lr_factor(open_round_)) : 1.0f;
    for (const DecayRange& d : options_.vote_decay) {
      const float keep = 1.0f - options_.outer.lr * factor * d.rate;
      for (size_t i = d.offset; i < d.offset + d.numel; ++i) theta_true_[i] *= keep;
    }
    if (factor != 1.0f) {
      for (size_t i = 0; i < n; ++i) sum_[i] *= factor;  // outer_ then steps by lr * factor * V
    }
    std::fill(votes_.begin(), votes_.end(), 0);
  } else {
    contributors = SumScreenedLocked();
    const float inv = contributors ? 1.0f / static_cast<float>(contributors) : 0.0f;
    for (size_t i = 0; i < n; ++i) sum_[i] *= inv;  // now the mean pseudo-gradient
  }
  outer_.Step(theta_true_.data(), sum_.data(), n);
  auto payload = PublishLocked();

  RoundUpdate update;
  update.round = open_round_;
  update.next_round = open_round_ + 1;
  update.checksum = pub_checksum_;
  update.contributors = static_cast<uint32_t>(contributors);
  update.bytes_up = round_bytes_up_;
  update.done = options_.total_rounds != 0 && update.next_round >= options_.total_rounds;
  update.payload = std::move(payload);
  history_.push_back(update);
  while (history_.size() > std::max<size_t>(1, options_.keep_rounds)) history_.pop_front();

  ++stats_.rounds_closed;
  stats_.bytes_down += update.payload->size();
  size_t missing = 0;
  for (uint64_t id : expected_) missing += !pushed_.count(id);
  stats_.stragglers += missing;
  stats_.last_contributors = update.contributors;
  stats_.last_expected = static_cast<uint32_t>(expected_.size());
  stats_.last_close_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - close_start).count();
  round_durations_.Observe(clock_->Now() - round_open_time_);
  round_open_time_ = clock_->Now();
  done_ = update.done;
  open_round_ = update.next_round;
  if (options_.checkpoint && options_.checkpoint_every &&
      (done_ || open_round_ % options_.checkpoint_every == 0)) {
    options_.checkpoint(ExportStateLocked());
  }
  // Logged after the checkpoint: with checkpoints every round, a round in the log is a round
  // a restarted server still has.
  Logf("server", "round %llu closed: %u contributors, %zu expected, up %llu bytes (%s), down %zu bytes (%s), checksum %016llx%s",
       static_cast<unsigned long long>(update.round), update.contributors, expected_.size(),
       static_cast<unsigned long long>(update.bytes_up), SizeNote(update.bytes_up, pushed_.size(), n).c_str(),
       update.payload->size(), SizeNote(update.payload->size(), 1, n).c_str(),
       static_cast<unsigned long long>(update.checksum), update.done ? " (final)" : "");

  round_bytes_up_ = 0;
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  first_push_time_ = straggler_clock_ = -1;
  for (uint64_t id : expected_) {  // missed this round: not waited for until it proves itself again
    auto m = members_.find(id);
    if (m == members_.end() || pushed_.count(id)) continue;
    m->second.proven = false;
    m->second.misses = std::min<uint32_t>(m->second.misses + 1, 20);
    m->second.reprove_after = open_round_ + (uint64_t{1} << m->second.misses);
  }
  pushed_.clear();
  expected_.clear();
  const bool cold = !AnyProvenLocked();
  for (const auto& [id, m] : members_)
    if (cold || m.proven) expected_.insert(id);
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

uint64_t RoundEngine::OpenRound() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_round_;
}

bool RoundEngine::IsMember(uint64_t worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_.count(worker_id) != 0;
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
      LogWarn("server", "evicting worker %llu (%s): silent for %.1f s",
              static_cast<unsigned long long>(it->first), it->second.name.c_str(), now - it->second.last_seen);
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

RoundEngine::RunState RoundEngine::State() const {
  std::lock_guard<std::mutex> lock(mu_);
  RunState st{done_, members_.size(), 0};
  for (const auto& [id, m] : members_) st.last_heard = std::max(st.last_heard, m.last_seen);
  return st;
}

EngineStats RoundEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.live_workers = members_.size();
  s.round_durations = round_durations_.Snapshot();
  for (const auto& [id, m] : members_)
    if (m.reported) {
      s.workers.push_back(EngineStats::Worker{id, m.name, m.stats});
      s.workers.back().stats.round = std::max(m.stats.round, m.next_round);  // pushes are fresher than reports
    }
  s.open_round = open_round_;
  s.done = done_;
  return s;
}

}  // namespace muloco
