// The server's round engine: membership, rounds, deadlines, aggregation and the outer step.
// No gRPC in here; the service (server/service.h) is a thin adapter and tests drive it
// directly with threads. Thread-safe: every public method may be called from any thread.
//
// Sessions and participants. Each Join opens a session (a worker id); sessions that name the
// same participant key (the service passes the join token's label) are one participant:
// one vote in the mean, one set of statistics, one place among the expected, however many
// sessions it holds. A session without a key is a participant of its own. A participant
// carries its token's weight in the mean. Its standing (proof, misses, backoff) outlives its
// sessions, so leaving and joining again resets nothing.
//
// A round r is open until it closes; it closes when at least max(1, min_quorum) sessions
// have pushed a non-empty update (kMean; an all-zero push does not make a round) and either every expected participant has pushed or the straggler deadline
// has passed: round_timeout_s after half the expected participants (rounded up) have
// pushed, so that a minority that pushes at once (a hostile volunteer sending noise the
// moment a round opens) cannot start the clock and cut honest workers' time to train; at a
// cold start (no participant proven: nobody to compare with), round_timeout_s after the
// round's first push; and, should a majority hang while heartbeating,
// kBackstopTimeouts x round_timeout_s after the first push whatever happens. Expected
// participants are the proven ones live when the round opened (at a cold start: every live
// one and every joiner before the round's first push). A participant is proven by a push
// (on time, or valid and one round late) made once its backoff has passed; it loses it by
// missing a round it was expected in, and each such miss doubles the rounds before any
// push may prove it again (misses are never forgiven). So sybils that join and never push
// cannot make rounds wait, and a participant that alternates pushes and silence holds only
// logarithmically few rounds open. Anyone joined may push in any round.
// Closing: every push of the round is held (max_round_bytes bounds them) until the close;
// then the participants' updates (the mean of each one's sessions' payloads), in the order
// of their keys, go through robust aggregation (server/screen.h): per-tensor norm bounds,
// a direction check and a size check; g = their weighted mean (or the majority vote of
// signs, one vote per participant); outer SGD on θ_true; down = C(θ_true − θ_pub);
// θ_pub += decode(down). Each session learns in its round's update what share of its push
// counted (RoundUpdate::landed), so its error feedback keeps the rest.
// θ_true − θ_pub is the downlink's error feedback.
// Asynchronous mode (EngineOptions::async, kMean only): no round barrier. A push names the
// public version (round) its worker started from; any version from open − max_staleness to
// the open round is taken into the open round (older: FAILED_PRECONDITION, fetch the model;
// a session pushes once per round and never twice from one version). The round closes once
// max(1, min_quorum) non-empty pushes are in and a grace window has passed since the first:
// grace_factor x the median gap between the latest pushes (their arrival rate), within
// [grace_min_s, grace_max_s]. Nobody is expected, so nobody is waited for and nobody misses:
// the quorum counts only sessions heard from (a push, a heartbeat) within the last
// max(grace_max_s, heartbeat_timeout_s / 2) (half the eviction time: several heartbeats of a
// live worker), so when fewer than min_quorum are up (killed, stalled, cut off) it shrinks to
// them (at least 1) and no round waits on a dead worker longer than that. Nothing a peer
// sends shrinks a quorum of honest workers: only their own silence does.
// A push s versions behind weighs (1 + s)^-staleness_power of its participant's weight.
// With partial_steps, the round's outer gradient scales by the share of a full round it
// merged (see AsyncOptions).
// Token weighting (either mode, when EngineOptions::inner_steps, the run's H, is set): a push
// says how many inner steps it holds (0: H) and weighs min(claim, cap) / H of its weight,
// the cap being what the server can vouch for: H, or with adaptive_h the most that session
// held from the acceptance of the push before its previous one on (its round started when
// the previous push left, perhaps before that one was accepted). A claim over the cap counts
// as the cap, logged and counted.
// Adaptive H (adaptive_h): each heartbeat tells a session how many steps to take,
// H x pace / its reported seconds per step, the pace being the median over the live
// participants (one report each, the mean of its sessions': more sessions buy no say) at the
// last close, so that a minority reporting absurdly fast steps cannot shorten honest
// workers' rounds much (one liar of two at most halves them), within [min_inner_steps, H],
// and H when that is within 20% of H (timing noise shaves no steps).
// No peer input can make the engine abort:
// payloads are bounded at decode (kMaxAbsValue), and should the server's own downlink ever
// fail its check, the round's step is discarded (θ_true reset to θ_pub) instead.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "codec/codec.h"
#include "common/histogram.h"
#include "common/landed.h"
#include "common/worker_stats.h"
#include "server/outer_optimizer.h"
#include "server/screen.h"

namespace muloco {

// How pushed payloads become the outer gradient g.
enum class Aggregation {
  kMean,  // g = mean of the decoded pseudo-gradients (DiLoCo, MuLoCo)
  kVote,  // g = sign(sum of the workers' sign bits), ties 0 (SignMuon); payloads hold signs only
};

// A matrix inside the flat parameter buffer.
struct MatrixRange {
  size_t offset = 0, rows = 0, cols = 0;
};

// What a checkpoint holds of the engine: enough to continue at `open_round`.
struct EngineState {
  uint64_t open_round = 0;
  uint64_t joins = 0;  // joins so far: the next joiner's data order (a resumed run gives no live order twice)
  std::vector<float> theta_true, theta_pub, momentum;
  std::vector<float> delayed_sum;  // Delayed Nesterov (OuterSgd): gradients since the momentum moved
  uint32_t delayed_steps = 0;
};

// Decoupled weight decay of one tensor: θ[offset, offset + numel) *= 1 - lr * rate.
struct DecayRange {
  size_t offset = 0, numel = 0;
  float rate = 0;
};

// Asynchronous mode's knobs (see the top).
struct AsyncOptions {
  bool enabled = false;
  uint64_t max_staleness = 4;     // versions a push may lag the open round
  double grace_min_s = 0.05, grace_max_s = 30;
  double grace_factor = 2;        // x the median gap between the latest pushes
  size_t gap_samples = 16;        // the latest gaps kept
  double staleness_power = 0.5;   // a push s versions behind weighs (1 + s)^-power
  // An outer step scales by the share of a full round it merged: its pushes (those screening
  // left in) over the sessions that pushed within the last max_staleness + 1 rounds, at most 1 (rounds of a
  // few pushes would otherwise move the model as far as a round of every worker's; counting
  // pushes, not steps: a short push's pseudo-gradient is already that much smaller).
  bool partial_steps = true;
  uint32_t momentum_every = 1;    // Delayed Nesterov's N (OuterSgdOptions::momentum_every)
};

struct EngineOptions {
  size_t min_quorum = 1;             // pushes required before a round may close
  uint32_t inner_steps = 0;          // the run's H: pushes weigh by their steps (0: unknown, no token weighting)
  bool adaptive_h = false;           // tell each session its steps from its speed (see the top)
  uint32_t min_inner_steps = 1;      // adaptive_h: the fewest steps told
  AsyncOptions async;                // no round barrier (kMean only)
  double round_timeout_s = 120;      // after half the expected workers pushed, stop waiting for the rest
  double heartbeat_timeout_s = 30;   // evict a worker silent for this long
  uint64_t total_rounds = 0;         // the run ends after this many rounds (0: never)
  size_t keep_rounds = 8;            // closed rounds kept for late AwaitRound calls
  uint64_t max_round_bytes = uint64_t{4} << 30;  // payload bytes held for one round's screening (kMean)
  std::vector<Segment> downlink;     // downlink encoding (empty: one dense fp32 segment)
  std::vector<Segment> uplink;       // the run's uplink codec: pushes in any other are refused (empty: any)
  OuterSgdOptions outer;
  ScreenOptions screen;              // kMean only: robust aggregation of the participants' updates
  std::vector<ScreenChunk> screen_chunks;  // the tensors screened one by one (empty: uplink's segments, or one)
  Aggregation aggregation = Aggregation::kMean;
  std::vector<MatrixRange> polar;    // kVote: matrices whose vote gets a Newton–Schulz polar step
  int polar_steps = 5;
  // kVote: the vote is the inner optimizer's step, so it follows the inner schedule and decays
  // like it: at round r, lr = outer.lr * vote_lr_factor(r) (empty: 1), then each range
  // θ *= 1 - lr * rate before θ -= lr * V.
  std::function<double(uint64_t round)> vote_lr_factor;
  std::vector<DecayRange> vote_decay;
  int close_threads = 0;             // threads summing the payloads at a round's close (0: one per core)
  // Called under the engine's lock after every `checkpoint_every`-th round closes and after
  // the final round, before any waiter learns of the close: a committed round is on disk
  // before any worker acts on it. 0 / empty: no checkpoints.
  uint64_t checkpoint_every = 0;
  std::function<void(const EngineState&)> checkpoint;
};

// The global update that closed a round.
struct RoundUpdate {
  uint64_t round = 0;
  uint64_t next_round = 0;
  uint64_t checksum = 0;        // of θ_pub after applying `payload`
  uint32_t contributors = 0;
  uint64_t bytes_up = 0;        // payload bytes received for the round, all workers
  bool done = false;            // no round follows
  std::shared_ptr<const std::string> payload;
  // Sessions whose push did not count in full: the ranges and the share that counted
  // (absent: all of it counted; a session that did not push is absent too).
  std::shared_ptr<const std::map<uint64_t, std::vector<LandedRange>>> landed;
  std::shared_ptr<const std::set<uint64_t>> pushed;  // sessions whose push counts in this round
};

// θ_pub at the start of the open round.
struct ModelSnapshot {
  uint64_t round = 0;
  uint64_t checksum = 0;
  std::shared_ptr<const std::vector<float>> params;
};

// Screening outcomes of one participant, by name (EngineStats::screened): rounds in which
// some tensor of its update was clipped, its weight was cut, or it was left out.
struct ScreenCounts {
  uint64_t clipped = 0, reduced = 0, rejected = 0;
};
// A participant's screening in the last closed round (kMean).
struct ScreenSample {
  std::string name;
  double cosine = 0, share = 0, norm = 0;  // share: of its weight before screening, 0..1
  uint32_t clipped = 0;
  double last_cosine = 0;  // to last round's aggregate (the staleness check)
};

// Counters, in one place so metrics and logs read the same numbers.
struct EngineStats {
  uint64_t joins = 0, leaves = 0, evictions = 0, rounds_closed = 0;
  uint64_t pushes_accepted = 0, bytes_up = 0, bytes_down = 0;
  uint64_t held_bytes_peak = 0;    // the most payload bytes held for screening at once, over the run
  uint64_t uncounted_pushes = 0;   // pushes of a participant that had already pushed in the round (merged or not counted)
  uint64_t rejected_unknown_worker = 0, rejected_wrong_round = 0, rejected_duplicate = 0,
           rejected_bad_payload = 0, rejected_round_full = 0;
  uint64_t downlink_resets = 0;  // rounds whose step was discarded because the downlink failed its check
  uint64_t stragglers = 0;       // expected participants missing when a round closed, summed over rounds
  uint64_t straggler_waits = 0;  // rounds that waited out the straggler deadline for a missing participant
  uint64_t stale_pushes = 0, staleness_sum = 0;  // async: pushes merged from an older version, their total lag
  uint64_t inner_steps_accepted = 0;  // inner steps of accepted pushes, as counted (claims capped)
  uint64_t inner_steps_merged = 0;    // of those, in pushes that screening left in (kMean)
  uint64_t capped_step_claims = 0;    // pushes that claimed more inner steps than the cap
  uint64_t steps_told_below_h = 0;    // adaptive_h: heartbeat replies that told fewer than H steps
  double last_grace_s = 0;       // async: the grace window the last round closed after
  uint32_t last_contributors = 0, last_expected = 0;  // of the last closed round
  double last_close_seconds = 0;  // the last close's work: screening, summing, outer step, downlink (no checkpoint)
  HistogramData round_durations;  // seconds from a round's opening to its close
  // Live workers' latest reports (Report); the server's open round minus a worker's round
  // is its staleness.
  struct Worker {
    uint64_t id;
    std::string name;
    WorkerStats stats;
  };
  std::vector<Worker> workers;
  std::map<std::string, ScreenCounts> screened;  // by participant name; at most kMaxScreenLabels names, then "other"
  std::vector<ScreenSample> last_screen;         // the last closed round's participants (kMean)
  size_t participants = 0;                       // live participants
  size_t live_workers = 0;
  uint64_t open_round = 0;
  bool done = false;
};

class RoundEngine {
 public:
  static constexpr size_t kMaxScreenLabels = 256;
  static constexpr double kBackstopTimeouts = 4;  // see the top: a hung majority's deadline
  // `clock` must outlive the engine.
  RoundEngine(EngineOptions options, std::vector<float> initial_params, const Clock* clock);
  // Continues from a saved state. REQUIRES: theta_true and theta_pub of equal size;
  // momentum empty or of that size.
  RoundEngine(EngineOptions options, EngineState state, const Clock* clock);

  struct Joined {
    uint64_t worker_id;
    uint64_t round;
    uint64_t checksum;
    uint64_t join_index;  // joins before this one in the run: a stable, non-random data seed offset
  };
  // REQUIRES: `name` is safe to log and to use as a metric label (SafeName, common/log.h).
  // `participant`: the key of the participant this session belongs to ("": its own);
  // `weight` > 0: the participant's weight in the mean (its latest join's).
  Joined Join(const std::string& name, const std::string& participant = "", float weight = 1.0f);
  // NOT_FOUND for unknown or evicted workers (they must join again).
  absl::Status Heartbeat(uint64_t worker_id);
  // The inner steps this session should take in its next local round (the run's H unless
  // adaptive_h), recorded as told: it bounds the session's next claim. 0: unknown session
  // or H unknown.
  uint32_t TellInnerSteps(uint64_t worker_id);
  absl::Status Leave(uint64_t worker_id);
  // Heartbeat that also records the worker's own counters (exported with its name).
  absl::Status Report(uint64_t worker_id, const WorkerStats& stats);

  // Validates and holds one session's payload for `round`. NOT_FOUND (unknown worker),
  // FAILED_PRECONDITION (not the open round, or the run is over: resync), ALREADY_EXISTS
  // (second push in a round, also once that round closed), INVALID_ARGUMENT (bad payload),
  // RESOURCE_EXHAUSTED (the round holds max_round_bytes of payloads). A rejected push
  // changes nothing but the counters (and a participant's proof, see above). In async mode
  // `round` is the version the push started from. `inner_steps`: the steps it holds (0: the
  // run's H), see token weighting at the top.
  absl::Status Push(uint64_t worker_id, uint64_t round, absl::string_view payload, uint32_t inner_steps = 0);

  // The update that closed `round`, waiting up to wait_s for the open round to close
  // (DEADLINE_EXCEEDED then: ask again). FAILED_PRECONDITION when `round` is older than
  // the kept history or not yet open: fetch the model.
  absl::StatusOr<RoundUpdate> AwaitRound(uint64_t round, double wait_s);

  // Counts a push the transport rejected before it reached Push (bad framing), so every
  // rejected payload shows up in Stats().rejected_bad_payload.
  void CountMalformedPush();

  ModelSnapshot Snapshot() const;
  // Evicts silent workers and closes a round whose deadline has passed. Call periodically.
  void Tick();
  // Wakes every AwaitRound waiter (shutdown).
  void WakeAll();

  EngineStats Stats() const;
  // What the serving loop polls every tick, without the copies Stats() makes (per-worker
  // reports, screening counts, the round-duration histogram).
  struct RunState {
    bool done = false;
    size_t live_workers = 0;
    double last_heard = 0;  // the latest call or heartbeat of a live worker (clock time; 0: none)
  };
  RunState State() const;
  EngineState ExportState() const;
  size_t num_params() const { return num_params_; }
  // Asynchronous mode: versions a push may lag the open round (0: synchronous).
  uint64_t max_staleness() const { return options_.async.enabled ? options_.async.max_staleness : 0; }
  uint64_t OpenRound() const;
  bool IsMember(uint64_t worker_id) const;

 private:
  struct Member {  // a session
    std::string name;
    std::string participant;  // its key in participants_
    double last_seen = 0;
    bool reported = false;
    WorkerStats stats;        // the last Report
    uint64_t next_round = 0;  // the round after its last accepted push
    uint64_t next_base = 0;   // async: the version after its last accepted push's (older: a duplicate)
    uint32_t told = 0;        // the latest tell of inner steps
    uint32_t told_logged = 0; // the latest tell logged (a tell moving by under 10% is not)
    // The most it held since its last accepted push: the tell it held then and every tell
    // since (a round starts when the push before it leaves, before that push is accepted).
    uint32_t told_since_push = 0;
    uint32_t step_cap = 0;    // the most steps its next push may be counted for
  };
  struct Participant {
    std::string name;       // its first session's name, for logs and metrics
    float weight = 1;
    size_t sessions = 0;    // live ones
    bool proven = false;    // see the round rules at the top
    bool proven_at_open = false;  // proven when the open round opened: its statistics count
    uint32_t misses = 0;          // rounds it was expected in and missed, over the run
    uint64_t reprove_after = 0;   // the first open round in which a push proves it again
    bool pushed = false;          // in the open round (kVote: its vote is counted)
  };
  // A validated push held until the close (kMean).
  struct Pending {
    uint64_t worker_id;
    std::string participant;
    std::string payload;
    uint64_t staleness = 0;  // async: versions behind the round it counts in
    uint32_t steps = 0;      // inner steps counted (0: H unknown)
  };

  // kMean: a push's payload checked against the plan and decoded for its norm, before the
  // lock is taken. kVote: nothing (the vote is checked while counted).
  struct PreChecked {
    absl::Status status;
    double norm = 0;
  };
  PreChecked PreCheck(absl::string_view payload) const;
  // kMean: holds a checked push until the close, unless the round is full.
  absl::Status HoldLocked(uint64_t worker_id, const std::string& participant, absl::string_view payload,
                          uint64_t staleness, uint32_t steps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The steps a push claiming `claim` (0: H) is counted for: at most the session's cap.
  uint32_t CountedStepsLocked(uint64_t worker_id, const Member& m, uint32_t claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // adaptive_h: the steps to tell a session (see the top); the pace is set at each close.
  uint32_t StepsForLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdatePaceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async: whether a push from version `base` may count in the open round.
  absl::Status CheckBaseLocked(uint64_t worker_id, const Member& m, uint64_t base) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async: the grace window after a round's first push (see the top).
  double GraceLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async: the pushes a round needs (see the top).
  size_t QuorumLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an accepted push from version `base` (the open round but in async mode);
  // `makes_round`: it counts towards the quorum.
  void AcceptLocked(uint64_t worker_id, Member& m, Participant& p, size_t bytes, bool makes_round, uint64_t base)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeCloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  EngineState ExportStateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseRoundLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kVote: sum_ = the sign of the counted votes (polar-projected, scaled by the schedule),
  // with the vote's weight decay applied to θ_true; returns the participants counted.
  size_t TallyVotesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `note`: what else the line says (async: the stale pushes and the grace window).
  void LogCloseLocked(const RoundUpdate& update, const std::string& note) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a session; its participant goes with its last session (a keyless one for good).
  void ForgetLocked(uint64_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AnyProvenLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push for `round` from a participant one round late: proves it (once its backoff passed).
  absl::Status LatePushLocked(Member& m, uint64_t round, const std::function<absl::Status(int32_t*)>& validate)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The held pushes that screening left in (those of participants it did not weigh 0).
  struct Merged {
    size_t pushes = 0;
    uint64_t steps = 0;  // the inner steps they count for
  };
  // Aggregates the held pushes into sum_ (the mean); returns how many participants counted,
  // and in *merged what it took in.
  size_t AggregateLocked(std::map<uint64_t, std::vector<LandedRange>>* landed, Merged* merged)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a round's verdicts in the stats and, when any update did not count in full, logs them.
  // A verdict's share is of its contribution's weight (token and staleness weighting are not screening).
  void RecordScreeningLocked(const std::vector<std::string>& keys, const std::vector<Contribution>& in,
                             const std::vector<Verdict>& verdicts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Expected participants that have pushed in the open round.
  size_t ExpectedInLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // θ_pub += decode(C(θ_true − θ_pub)); returns the payload.
  std::shared_ptr<const std::string> PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a close's log line adds: the held pushes' staleness (async) and the inner steps
  // merged (and any that screening left out).
  std::string CloseNoteLocked(const Merged& merged) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // sum_ *= s (the outer gradient before the step); nothing at 1.
  void ScaleSumLocked(float s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async: the share of a full round the round merged (see AsyncOptions::partial_steps): its
  // `merged` pushes over the sessions that pushed within max_staleness + 1 rounds, at most 1.
  double MergedShareLocked(size_t merged) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a close: who missed, who is expected in the next round.
  void OpenNextRoundLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EngineOptions options_;
  const Clock* const clock_;
  const size_t num_params_;
  const std::vector<Segment> downlink_;
  const int close_threads_;

  mutable absl::Mutex mu_;
  absl::CondVar round_closed_;
  OuterSgd outer_ ABSL_GUARDED_BY(mu_);
  std::vector<float> theta_true_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<float>> theta_pub_ ABSL_GUARDED_BY(mu_);  // replaced, never mutated
  std::shared_ptr<std::vector<float>> spare_pub_ ABSL_GUARDED_BY(mu_);  // a retired θ_pub, reused once unread
  uint64_t pub_checksum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t open_round_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_worker_id_ ABSL_GUARDED_BY(mu_);  // random start
  std::map<uint64_t, Member> members_ ABSL_GUARDED_BY(mu_);  // sessions by worker id
  std::map<std::string, Participant> participants_ ABSL_GUARDED_BY(mu_);  // by key
  std::set<std::string> expected_ ABSL_GUARDED_BY(mu_);  // participant keys
  std::set<uint64_t> pushed_ ABSL_GUARDED_BY(mu_);  // sessions that pushed in the open round
  size_t quorum_pushes_ ABSL_GUARDED_BY(mu_) = 0;  // of them, those that count for the quorum
  std::vector<float> sum_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);  // this round's held pushes, in arrival order
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  RobustAggregator aggregator_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> votes_ ABSL_GUARDED_BY(mu_);  // (kVote only)
  double first_push_time_ ABSL_GUARDED_BY(mu_) = -1;
  double last_push_time_ ABSL_GUARDED_BY(mu_) = -1;   // async: for the gaps between pushes
  std::deque<double> push_gaps_ ABSL_GUARDED_BY(mu_);  // async: the latest gap_samples gaps
  double straggler_clock_ ABSL_GUARDED_BY(mu_) = -1;  // when the straggler deadline started
  double round_open_time_ ABSL_GUARDED_BY(mu_);
  double pace_ ABSL_GUARDED_BY(mu_) = 0;  // adaptive_h: the median seconds per step at the last close (0: none)
  Histogram round_durations_{DurationBuckets()};
  uint64_t round_bytes_up_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<RoundUpdate> history_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muloco
