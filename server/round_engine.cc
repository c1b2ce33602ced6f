// RoundEngine: see round_engine.h for the round rules.
#include "server/round_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/checksum.h"
#include "common/median.h"
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

// The tensors screened one by one: the options', else the uplink plan's segments, else one.
std::vector<ScreenChunk> ScreenChunksFor(const EngineOptions& o, size_t n) {
  if (!o.screen_chunks.empty()) return o.screen_chunks;
  std::vector<uint64_t> sizes;
  for (const Segment& s : o.uplink) sizes.push_back(s.numel);
  if (sizes.empty()) sizes.push_back(n);
  return ChunksOf(sizes);
}

int CloseThreads(int requested) {
  return requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
}  // namespace

RoundEngine::RoundEngine(EngineOptions options, std::vector<float> initial_params, const Clock* clock)
    : RoundEngine(std::move(options), Fresh(std::move(initial_params)), clock) {}

RoundEngine::RoundEngine(EngineOptions options, EngineState state, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      num_params_(state.theta_pub.size()),
      downlink_(options_.downlink.empty() ? DenseSegments(num_params_) : options_.downlink),
      close_threads_(CloseThreads(options_.close_threads)),
      outer_(options_.outer, num_params_),
      theta_true_(std::move(state.theta_true)),
      theta_pub_(std::make_shared<const std::vector<float>>(std::move(state.theta_pub))),
      open_round_(state.open_round),
      sum_(num_params_, 0.0f),
      aggregator_(options_.screen, ScreenChunksFor(options_, num_params_), num_params_, close_threads_),
      votes_(options_.aggregation == Aggregation::kVote ? num_params_ : 0, 0) {
  if (state.momentum.size() == outer_.momentum_buffer().size()) {
    outer_.set_momentum_buffer(std::move(state.momentum));
    outer_.set_delayed(std::move(state.delayed_sum), state.delayed_steps);  // else (another N) it starts afresh
  }
  pub_checksum_ = ParamChecksum(theta_pub_->data(), num_params_);
  round_open_time_ = clock_->Now();
  done_ = options_.total_rounds != 0 && open_round_ >= options_.total_rounds;
  stats_.joins = state.joins;
  // Ids differ across server restarts, so a worker holding an id from before a crash is
  // unknown here (and rejoins) instead of speaking for whoever got that number.
  next_worker_id_ = (std::random_device{}() & 0xffffffu) * (uint64_t{1} << 32) + 1;
}

RoundEngine::Joined RoundEngine::Join(const std::string& name, const std::string& participant, float weight) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_worker_id_++;
  // Keyless sessions are participants of their own ('#' never starts a token label).
  const std::string key = participant.empty() ? absl::StrCat("#", id) : participant;
  Participant& p = participants_[key];
  if (p.sessions++ == 0) p.name = name;
  p.weight = weight > 0 && std::isfinite(weight) ? weight : 1.0f;
  // At a cold start every joiner is waited for until the round closes (the straggler clock,
  // started by the first push, bounds the wait): a worker that starts a moment after another
  // is not left one round behind, never waited for, while a fast volunteer closes rounds.
  if (!options_.async.enabled && !AnyProvenLocked()) expected_.insert(key);
  Member m;
  m.name = name;
  m.participant = key;
  m.last_seen = clock_->Now();
  // A first push may hold H: it may start before a tell.
  m.told = m.told_since_push = m.step_cap = options_.inner_steps;
  members_[id] = std::move(m);
  const uint64_t join_index = stats_.joins++;
  Logf("server", "worker %llu (%s) joined at round %llu; %zu live", static_cast<unsigned long long>(id), name.c_str(),
       static_cast<unsigned long long>(open_round_), members_.size());
  return Joined{id, open_round_, pub_checksum_, join_index};
}

absl::Status RoundEngine::Heartbeat(uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(worker_id);
  if (it == members_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  it->second.last_seen = clock_->Now();
  return absl::OkStatus();
}

uint32_t RoundEngine::TellInnerSteps(uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(worker_id);
  if (it == members_.end()) return 0;
  Member& m = it->second;
  const uint32_t steps = StepsForLocked(m);
  const uint32_t last = m.told_logged;
  if (steps != last && (steps == options_.inner_steps || 10 * (steps > last ? steps - last : last - steps) >= last)) {
    Logf("server", "worker %llu (%s): %u inner steps a round (was %u; %.3f s a step, pace %.3f s)",
         static_cast<unsigned long long>(worker_id), m.name.c_str(), steps, last, m.stats.inner_step_seconds, pace_);
    m.told_logged = steps;
  }
  m.told = steps;
  m.told_since_push = std::max(m.told_since_push, steps);
  m.step_cap = std::max(m.step_cap, steps);
  stats_.steps_told_below_h += steps < options_.inner_steps;
  return steps;
}

uint32_t RoundEngine::StepsForLocked(const Member& m) const {
  const uint32_t h = options_.inner_steps;
  const double mine = m.reported ? m.stats.inner_step_seconds : 0;
  if (!options_.adaptive_h || h == 0 || pace_ <= 0 || mine <= 0) return h;
  const double steps = h * pace_ / mine;
  if (steps >= 0.8 * h) return h;  // within timing noise of the pace
  const uint32_t lo = std::clamp<uint32_t>(options_.min_inner_steps, 1, h);
  return static_cast<uint32_t>(std::clamp(std::floor(steps), static_cast<double>(lo), static_cast<double>(h)));
}

void RoundEngine::UpdatePaceLocked() {
  if (!options_.adaptive_h) return;
  std::map<std::string, std::pair<double, int>> by_participant;  // sum and count of its sessions' reports
  for (const auto& [id, m] : members_) {
    if (!m.reported || !(m.stats.inner_step_seconds > 0)) continue;
    auto& [sum, n] = by_participant[m.participant];
    sum += m.stats.inner_step_seconds;
    ++n;
  }
  std::vector<double> seconds;
  for (const auto& [key, sn] : by_participant) seconds.push_back(sn.first / sn.second);
  if (!seconds.empty()) pace_ = Median(std::move(seconds));
}

uint32_t RoundEngine::CountedStepsLocked(uint64_t worker_id, const Member& m, uint32_t claim) {
  const uint32_t h = options_.inner_steps;
  if (h == 0) return 0;
  if (claim == 0) claim = h;
  const uint32_t cap = options_.adaptive_h ? std::min(h, m.step_cap) : h;
  if (claim <= cap) return claim;
  ++stats_.capped_step_claims;
  LogWarn("server", "worker %llu (%s) claims %u inner steps, told at most %u: counted as %u",
          static_cast<unsigned long long>(worker_id), m.name.c_str(), claim, cap, cap);
  return cap;
}

absl::Status RoundEngine::Report(uint64_t worker_id, const WorkerStats& stats) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(worker_id);
  if (it == members_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  it->second.last_seen = clock_->Now();
  it->second.stats = stats;
  it->second.reported = true;
  return absl::OkStatus();
}

absl::Status RoundEngine::Leave(uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  if (!members_.count(worker_id)) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  ForgetLocked(worker_id);
  ++stats_.leaves;
  Logf("server", "worker %llu left; %zu live", static_cast<unsigned long long>(worker_id), members_.size());
  MaybeCloseLocked();
  return absl::OkStatus();
}

bool RoundEngine::AnyProvenLocked() const {
  for (const auto& [key, p] : participants_)
    if (p.proven && p.sessions > 0) return true;
  return false;
}

void RoundEngine::ForgetLocked(uint64_t worker_id) {
  auto it = members_.find(worker_id);
  if (it == members_.end()) return;
  const std::string key = it->second.participant;
  members_.erase(it);
  auto p = participants_.find(key);
  if (p == participants_.end() || --p->second.sessions > 0) return;
  expected_.erase(key);
  // A keyless participant never comes back; a token's keeps its standing for its next join
  // (tokens are few: the token file bounds them). Its pushes of the open round still count.
  if (key[0] == '#' && !p->second.pushed) participants_.erase(p);
}

absl::Status RoundEngine::LatePushLocked(Member& m, uint64_t round,
                                         const std::function<absl::Status(int32_t*)>& validate) {
  ++stats_.rejected_wrong_round;
  Participant& p = participants_[m.participant];
  // A valid update for the round that just closed proves the participant is training: it is
  // expected from the next round on, so a slower worker is not left racing every close.
  if (!done_ && round + 1 == open_round_ && open_round_ >= p.reprove_after) {
    std::vector<int32_t> counts(options_.aggregation == Aggregation::kVote ? num_params_ : 0);
    if (absl::Status s = validate(counts.data()); !s.ok()) {
      --stats_.rejected_wrong_round;  // counted as what it is
      ++stats_.rejected_bad_payload;
      return s;
    }
    p.proven = true;
  }
  return absl::FailedPreconditionError(
      done_ ? "the run is over"
            : absl::StrCat("push for round ", round, " but round ", open_round_, " is open; fetch the model"));
}

RoundEngine::PreChecked RoundEngine::PreCheck(absl::string_view payload) const {
  PreChecked out;
  if (options_.aggregation == Aggregation::kVote) return out;  // checked while counting, under the lock
  out.status = options_.uplink.empty() ? absl::OkStatus() : CheckPlan(payload, options_.uplink);
  if (out.status.ok()) {
    absl::StatusOr<double> n = DecodedNorm(payload, num_params_);
    out.status = n.status();
    out.norm = n.value_or(0);
  }
  return out;
}

absl::Status RoundEngine::Push(uint64_t worker_id, uint64_t round, absl::string_view payload, uint32_t inner_steps) {
  // kMean: the payload is validated before taking the lock, so concurrent pushes decode on
  // all cores (each holds one segment's values, not a model).
  const PreChecked checked = PreCheck(payload);
  const bool vote = options_.aggregation == Aggregation::kVote;
  absl::MutexLock lock(&mu_);
  auto member = members_.find(worker_id);
  if (member == members_.end()) {
    ++stats_.rejected_unknown_worker;
    return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  }
  Member& m = member->second;
  m.last_seen = clock_->Now();
  // kMean: the result of the check above. kVote: validates while adding the signs to `counts`.
  auto validate = [&](int32_t* counts) -> absl::Status {
    if (!vote) return checked.status;
    if (!options_.uplink.empty()) {
      if (absl::Status s = CheckPlan(payload, options_.uplink); !s.ok()) return s;
    }
    return VoteAccumulate(payload, num_params_, counts);
  };
  if (options_.async.enabled) {
    if (absl::Status s = CheckBaseLocked(worker_id, m, round); !s.ok()) return s;
  } else if (!done_ && round + 1 == m.next_round) {
    // Its push of this round was accepted and closed the round; the reply was lost.
    ++stats_.rejected_duplicate;
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker_id, " already pushed round ", round, " (closed)"));
  } else if (done_ || round != open_round_) {
    return LatePushLocked(m, round, validate);
  }
  if (pushed_.count(worker_id)) {
    ++stats_.rejected_duplicate;
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker_id, " already pushed in round ", open_round_));
  }
  Participant& p = participants_[m.participant];
  // kVote: one vote per participant; its other sessions' pushes are checked, not counted.
  std::vector<int32_t> scratch(vote && p.pushed ? num_params_ : 0);
  if (const absl::Status s = validate(vote && p.pushed ? scratch.data() : votes_.data()); !s.ok()) {
    ++stats_.rejected_bad_payload;
    return s;
  }
  const uint32_t steps = CountedStepsLocked(worker_id, m, inner_steps);
  if (!vote) {
    if (absl::Status s = HoldLocked(worker_id, m.participant, payload, open_round_ - round, steps); !s.ok()) return s;
  }
  stats_.inner_steps_accepted += steps;
  // The next push's round started when this one left: it holds at most what the session held
  // since the previous acceptance (and what it is told from now on raises the cap).
  m.step_cap = m.told_since_push;
  m.told_since_push = m.told;
  AcceptLocked(worker_id, m, p, payload.size(), /*makes_round=*/vote || checked.norm > 0, round);
  MaybeCloseLocked();
  return absl::OkStatus();
}

absl::Status RoundEngine::CheckBaseLocked(uint64_t worker_id, const Member& m, uint64_t base) {
  if (!done_ && base < m.next_base) {  // its push from this version was taken (the reply may have been lost)
    ++stats_.rejected_duplicate;
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker_id, " already pushed from version ", base,
                                                 " or a later one"));
  }
  const uint64_t lag = base <= open_round_ ? open_round_ - base : 0;
  if (done_ || base > open_round_ || lag > options_.async.max_staleness) {
    ++stats_.rejected_wrong_round;
    return absl::FailedPreconditionError(
        done_ ? std::string("the run is over")
        : base > open_round_
            ? absl::StrCat("version ", base, " is not published (round ", open_round_, " is open); fetch the model")
            : absl::StrCat("a push from version ", base, " is ", lag, " versions behind round ", open_round_,
                           " (at most ", options_.async.max_staleness, "); fetch the model"));
  }
  return absl::OkStatus();
}

double RoundEngine::GraceLocked() const {
  const AsyncOptions& a = options_.async;
  const double median = push_gaps_.empty() ? 0 : Median(std::vector<double>(push_gaps_.begin(), push_gaps_.end()));
  return std::clamp(a.grace_factor * median, a.grace_min_s, std::max(a.grace_min_s, a.grace_max_s));
}

size_t RoundEngine::QuorumLocked() const {
  const double now = clock_->Now(), window = std::max(options_.async.grace_max_s, options_.heartbeat_timeout_s / 2);
  size_t heard = 0;
  for (const auto& [id, m] : members_) heard += now - m.last_seen <= window;
  return std::clamp<size_t>(heard, 1, std::max<size_t>(1, options_.min_quorum));
}

absl::Status RoundEngine::HoldLocked(uint64_t worker_id, const std::string& participant, absl::string_view payload,
                                     uint64_t staleness, uint32_t steps) {
  if (pending_bytes_ + payload.size() > options_.max_round_bytes) {
    ++stats_.rejected_round_full;
    return absl::ResourceExhaustedError(absl::StrCat("this round already holds ", pending_bytes_,
                                                     " payload bytes; retry in the next round"));
  }
  pending_.push_back(Pending{worker_id, participant, std::string(payload), staleness, steps});
  pending_bytes_ += payload.size();
  stats_.held_bytes_peak = std::max(stats_.held_bytes_peak, pending_bytes_);
  return absl::OkStatus();
}

void RoundEngine::AcceptLocked(uint64_t worker_id, Member& m, Participant& p, size_t bytes, bool makes_round,
                               uint64_t base) {
  if (p.pushed) ++stats_.uncounted_pushes;
  p.pushed = true;
  // An on-time push proves it too, but not before its backoff has passed: a participant
  // that missed a round it was waited for is not waited for again until then.
  if (open_round_ >= p.reprove_after) p.proven = true;
  m.next_round = open_round_ + 1;
  pushed_.insert(worker_id);
  quorum_pushes_ += makes_round;  // an empty update does not make a round
  const double now = clock_->Now();
  if (first_push_time_ < 0) first_push_time_ = now;
  if (options_.async.enabled) {
    m.next_base = base + 1;
    stats_.stale_pushes += base < open_round_;
    stats_.staleness_sum += open_round_ - base;
    if (last_push_time_ >= 0) push_gaps_.push_back(now - last_push_time_);
    while (push_gaps_.size() > std::max<size_t>(1, options_.async.gap_samples)) push_gaps_.pop_front();
    last_push_time_ = now;
  }
  ++stats_.pushes_accepted;
  stats_.bytes_up += bytes;
  round_bytes_up_ += bytes;
}

size_t RoundEngine::ExpectedInLocked() const {
  size_t in = 0;
  for (const std::string& key : expected_) {
    auto p = participants_.find(key);
    in += p != participants_.end() && p->second.pushed;
  }
  return in;
}

void RoundEngine::MaybeCloseLocked() {
  if (done_ || pushed_.empty()) return;
  if (options_.async.enabled) {  // the quorum, then the grace window; nobody is waited for
    const double grace = GraceLocked();
    if (quorum_pushes_ >= QuorumLocked() && clock_->Now() >= first_push_time_ + grace) {
      stats_.last_grace_s = grace;
      CloseRoundLocked();
    }
    return;
  }
  const size_t expected_in = ExpectedInLocked();
  const double now = clock_->Now();
  // The straggler clock: once half the expected participants are in; at a cold start (no
  // one proven, so no one to be expected on merit) from the first push.
  const bool cold = !AnyProvenLocked();
  if (straggler_clock_ < 0 && (cold || 2 * expected_in >= expected_.size())) straggler_clock_ = now;
  if (quorum_pushes_ < std::max<size_t>(1, options_.min_quorum)) return;
  const bool all_in = expected_in == expected_.size();
  const bool deadline = (straggler_clock_ >= 0 && now >= straggler_clock_ + options_.round_timeout_s) ||
                        now >= first_push_time_ + kBackstopTimeouts * options_.round_timeout_s;
  if (all_in || deadline) {
    if (!all_in) ++stats_.straggler_waits;
    CloseRoundLocked();
  }
}

void RoundEngine::RecordScreeningLocked(const std::vector<std::string>& keys, const std::vector<Contribution>& in,
                                        const std::vector<Verdict>& verdicts) {
  std::string report;
  stats_.last_screen.clear();
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const Verdict& v = verdicts[i];
    const Participant& p = participants_[keys[i]];
    const double share = in[i].weight > 0 ? v.weight / in[i].weight : 0;
    stats_.last_screen.push_back(ScreenSample{p.name, v.cosine, share, v.norm, v.clipped, v.last_cosine});
    const bool cut = share < 1, clipped = v.clipped > 0;
    if (!cut && !clipped) continue;
    const bool known = stats_.screened.count(p.name) || stats_.screened.size() < kMaxScreenLabels;
    ScreenCounts& c = stats_.screened[known ? p.name : "other"];
    c.clipped += clipped;
    c.reduced += cut && share > 0;
    c.rejected += share == 0;
    absl::StrAppendFormat(&report,
                          "%s%s: weight %.2f%s%s, cosine %.3f (to last round's %.3f), norm %.4g, %u of %zu tensors clipped",
                          report.empty() ? "" : "; ", p.name, share, *v.reason ? " " : "", v.reason, v.cosine,
                          v.last_cosine, v.norm, v.clipped, v.landed.size());
  }
  if (!report.empty()) {
    LogWarn("server", "round %llu screening (%s): %s", static_cast<unsigned long long>(open_round_),
            aggregator_.mode() == Robust::kReject ? "reject" : aggregator_.mode() == Robust::kTrimmed ? "trimmed" : "clip",
            report.c_str());
  }
}

size_t RoundEngine::AggregateLocked(std::map<uint64_t, std::vector<LandedRange>>* landed, Merged* merged) {
  // Participants in key order, each one's sessions in id order: a fixed order, so the same
  // pushes give the same bits however they arrived.
  std::map<std::string, std::vector<const Pending*>> by_key;
  for (const Pending& p : pending_) by_key[p.participant].push_back(&p);
  std::vector<std::string> keys;
  std::vector<Contribution> in;
  for (auto& [key, held] : by_key) {
    std::sort(held.begin(), held.end(), [](const Pending* a, const Pending* b) { return a->worker_id < b->worker_id; });
    const Participant& p = participants_[key];
    Contribution c;
    c.name = p.name;
    c.proven = p.proven_at_open;
    // The mean over its sessions of (steps / H) x (1 + staleness)^-power: 1 for a full, fresh push.
    double fresh = 0, share = 0;
    const uint32_t h_steps = options_.inner_steps;
    for (const Pending* h : held) {
      c.payloads.push_back(h->payload);
      const double steps = h_steps && h->steps ? static_cast<double>(h->steps) / h_steps : 1.0;
      share += steps;
      fresh += steps * (h->staleness ? std::pow(1.0 + h->staleness, -options_.async.staleness_power) : 1.0);
    }
    c.weight = fresh == held.size() ? p.weight : static_cast<float>(p.weight * fresh / held.size());
    c.steps_share = share / held.size();
    keys.push_back(key);
    in.push_back(std::move(c));
  }
  const std::vector<Verdict> verdicts = aggregator_.Aggregate(in, sum_.data());
  RecordScreeningLocked(keys, in, verdicts);
  size_t counted = 0;
  *merged = Merged{};
  const std::vector<ScreenChunk>& chunks = aggregator_.chunks();
  for (size_t i = 0; i < verdicts.size(); ++i) {
    counted += verdicts[i].weight > 0;
    if (verdicts[i].weight > 0) {
      merged->pushes += by_key[keys[i]].size();
      for (const Pending* h : by_key[keys[i]]) merged->steps += h->steps;
    }
    std::vector<LandedRange> ranges;
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (verdicts[i].landed[c] < 1.0f) ranges.push_back(LandedRange{chunks[c].offset, chunks[c].numel, verdicts[i].landed[c]});
    }
    if (ranges.empty()) continue;
    for (const Pending* h : by_key[keys[i]]) (*landed)[h->worker_id] = ranges;
  }
  return counted;
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
    outer_.set_delayed(std::vector<float>(outer_.delayed_sum().size(), 0.0f), 0);
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    payload = std::make_shared<const std::string>(Compress(downlink_, nullptr, 1.0f, sum_.data()));
    return payload;  // θ_pub unchanged: the zero update decodes to exactly nothing
  }
  spare_pub_ = std::const_pointer_cast<std::vector<float>>(theta_pub_);
  theta_pub_ = std::move(next_pub);
  pub_checksum_ = ParamChecksum(theta_pub_->data(), n);
  return payload;
}

size_t RoundEngine::TallyVotesLocked() {
  const size_t n = num_params_;
  size_t contributors = 0;
  for (const auto& [key, p] : participants_) contributors += p.pushed;
  VoteSign(votes_.data(), n, sum_.data());  // g = sign(Σ s_k), ties 0
  for (const MatrixRange& m : options_.polar) PolarNewtonSchulz(sum_.data() + m.offset, m.rows, m.cols, options_.polar_steps);
  const float factor = options_.vote_lr_factor ? static_cast<float>(options_.vote_lr_factor(open_round_)) : 1.0f;
  for (const DecayRange& d : options_.vote_decay) {
    const float keep = 1.0f - options_.outer.lr * factor * d.rate;
    for (size_t i = d.offset; i < d.offset + d.numel; ++i) theta_true_[i] *= keep;
  }
  ScaleSumLocked(factor);  // outer_ then steps by lr * factor * V
  std::fill(votes_.begin(), votes_.end(), 0);
  return contributors;
}

std::string RoundEngine::CloseNoteLocked(const Merged& merged) const {
  std::string note;
  if (options_.async.enabled) {
    uint64_t stale = 0, lag = 0;
    for (const Pending& p : pending_) stale += p.staleness > 0, lag = std::max(lag, p.staleness);
    note = absl::StrFormat(" (async: %llu of %zu pushes stale, up to %llu versions; grace %.2f s)",
                           static_cast<unsigned long long>(stale), pending_.size(), static_cast<unsigned long long>(lag),
                           stats_.last_grace_s);
  }
  if (options_.inner_steps && options_.aggregation == Aggregation::kMean) {
    uint64_t steps = 0;
    for (const Pending& p : pending_) steps += p.steps;
    absl::StrAppendFormat(&note, "; %llu inner steps merged", static_cast<unsigned long long>(merged.steps));
    if (merged.steps < steps) {
      absl::StrAppendFormat(&note, " (%llu more screened out)", static_cast<unsigned long long>(steps - merged.steps));
    }
  }
  return note;
}

void RoundEngine::CloseRoundLocked() {
  const auto close_start = std::chrono::steady_clock::now();
  auto landed = std::make_shared<std::map<uint64_t, std::vector<LandedRange>>>();
  // sum_ = the vote's sign, or the screened mean pseudo-gradient
  Merged merged{pending_.size(), 0};
  const size_t contributors =
      options_.aggregation == Aggregation::kVote ? TallyVotesLocked() : AggregateLocked(landed.get(), &merged);
  std::string note = CloseNoteLocked(merged);
  stats_.inner_steps_merged += merged.steps;
  pending_.clear();
  pending_bytes_ = 0;
  const double share = options_.async.enabled && options_.async.partial_steps ? MergedShareLocked(merged.pushes) : 1.0;
  if (share < 1) absl::StrAppendFormat(&note, "; step x%.2f", share);
  ScaleSumLocked(static_cast<float>(share));
  outer_.Step(theta_true_.data(), sum_.data(), num_params_);
  auto payload = PublishLocked();

  RoundUpdate update;
  update.round = open_round_;
  update.next_round = open_round_ + 1;
  update.checksum = pub_checksum_;
  update.contributors = static_cast<uint32_t>(contributors);
  update.bytes_up = round_bytes_up_;
  update.done = options_.total_rounds != 0 && update.next_round >= options_.total_rounds;
  update.payload = std::move(payload);
  update.landed = std::move(landed);
  update.pushed = std::make_shared<const std::set<uint64_t>>(pushed_);
  history_.push_back(update);
  while (history_.size() > std::max<size_t>(1, options_.keep_rounds)) history_.pop_front();

  ++stats_.rounds_closed;
  stats_.bytes_down += update.payload->size();
  stats_.stragglers += expected_.size() - ExpectedInLocked();
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
  LogCloseLocked(update, note);
  round_bytes_up_ = 0;
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  OpenNextRoundLocked();
  round_closed_.SignalAll();
}

void RoundEngine::LogCloseLocked(const RoundUpdate& update, const std::string& note) const {
  const size_t n = num_params_;
  Logf("server", "round %llu closed: %u contributors, %zu expected%s, up %llu bytes (%s), down %zu bytes (%s), checksum %016llx%s",
       static_cast<unsigned long long>(update.round), update.contributors, expected_.size(), note.c_str(),
       static_cast<unsigned long long>(update.bytes_up), SizeNote(update.bytes_up, pushed_.size(), n).c_str(),
       update.payload->size(), SizeNote(update.payload->size(), 1, n).c_str(),
       static_cast<unsigned long long>(update.checksum), update.done ? " (final)" : "");
}

void RoundEngine::OpenNextRoundLocked() {
  first_push_time_ = straggler_clock_ = -1;
  UpdatePaceLocked();
  for (const std::string& key : expected_) {  // missed this round: not waited for until its backoff passed
                                              // (async: nobody is expected)
    auto p = participants_.find(key);
    if (p == participants_.end() || p->second.pushed) continue;
    p->second.proven = false;
    p->second.misses = std::min<uint32_t>(p->second.misses + 1, 20);
    p->second.reprove_after = open_round_ + (uint64_t{1} << p->second.misses);
  }
  pushed_.clear();
  quorum_pushes_ = 0;
  expected_.clear();
  const bool cold = !AnyProvenLocked();
  for (auto it = participants_.begin(); it != participants_.end();) {
    Participant& p = it->second;
    p.pushed = false;
    p.proven_at_open = p.proven;
    if (p.sessions == 0 && it->first[0] == '#') {  // a keyless participant whose session ended
      it = participants_.erase(it);
      continue;
    }
    if (p.sessions > 0 && (cold || p.proven) && !options_.async.enabled) expected_.insert(it->first);
    ++it;
  }
}

absl::StatusOr<RoundUpdate> RoundEngine::AwaitRound(uint64_t round, double wait_s) {
  absl::MutexLock lock(&mu_);
  if (round > open_round_ || (round == open_round_ && done_)) {
    return absl::FailedPreconditionError(absl::StrCat("round ", round, " is not open (open: ", open_round_, ")"));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(wait_s);
  while (open_round_ <= round && !round_closed_.WaitWithDeadline(&mu_, deadline)) {
  }
  if (open_round_ <= round) return absl::DeadlineExceededError(absl::StrCat("round ", round, " still open"));
  for (const RoundUpdate& u : history_) {
    if (u.round == round) return u;
  }
  return absl::FailedPreconditionError(absl::StrCat("round ", round, " is too old; fetch the model"));
}

void RoundEngine::ScaleSumLocked(float s) {
  if (s == 1.0f) return;
  for (float& g : sum_) g *= s;
}

double RoundEngine::MergedShareLocked(size_t merged) const {
  size_t active = 0;  // sessions that pushed within the last max_staleness + 1 rounds (this one included)
  for (const auto& [id, m] : members_) {
    active += m.next_round > 0 && m.next_round + options_.async.max_staleness >= open_round_;
  }
  return std::min(1.0, static_cast<double>(merged) / std::max<size_t>(1, active));
}

uint64_t RoundEngine::OpenRound() const {
  absl::MutexLock lock(&mu_);
  return open_round_;
}

bool RoundEngine::IsMember(uint64_t worker_id) const {
  absl::MutexLock lock(&mu_);
  return members_.count(worker_id) != 0;
}

ModelSnapshot RoundEngine::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return ModelSnapshot{open_round_, pub_checksum_, theta_pub_};
}

void RoundEngine::Tick() {
  absl::MutexLock lock(&mu_);
  const double now = clock_->Now();
  std::vector<uint64_t> silent;
  for (const auto& [id, m] : members_) {
    if (now - m.last_seen <= options_.heartbeat_timeout_s) continue;
    LogWarn("server", "evicting worker %llu (%s): silent for %.1f s", static_cast<unsigned long long>(id),
            m.name.c_str(), now - m.last_seen);
    silent.push_back(id);
  }
  for (uint64_t id : silent) ForgetLocked(id);
  stats_.evictions += silent.size();
  MaybeCloseLocked();
}

void RoundEngine::CountMalformedPush() {
  absl::MutexLock lock(&mu_);
  ++stats_.rejected_bad_payload;
}

void RoundEngine::WakeAll() { round_closed_.SignalAll(); }

EngineState RoundEngine::ExportStateLocked() const {
  return EngineState{open_round_,           stats_.joins,         theta_true_, *theta_pub_, outer_.momentum_buffer(),
                     outer_.delayed_sum(), outer_.delayed_steps()};
}

EngineState RoundEngine::ExportState() const {
  absl::MutexLock lock(&mu_);
  return ExportStateLocked();
}

RoundEngine::RunState RoundEngine::State() const {
  absl::MutexLock lock(&mu_);
  RunState st{done_, members_.size(), 0};
  for (const auto& [id, m] : members_) st.last_heard = std::max(st.last_heard, m.last_seen);
  return st;
}

EngineStats RoundEngine::Stats() const {
  absl::MutexLock lock(&mu_);
  EngineStats s = stats_;
  s.live_workers = members_.size();
  for (const auto& [key, p] : participants_) s.participants += p.sessions > 0;
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
