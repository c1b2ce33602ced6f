// The server's round engine: membership, rounds, deadlines, aggregation and the outer step.
// No gRPC in here; the service (server/service.h) is a thin adapter and tests drive it
// directly with threads. Thread-safe: every public method may be called from any thread.
//
// A round r is open until it closes; it closes when at least max(1, min_quorum) workers
// have pushed and either every expected worker has pushed or the straggler deadline has
// passed: round_timeout_s after half the expected workers (rounded up) have pushed, so that
// a minority that pushes at once (a hostile volunteer sending noise the moment a round
// opens) cannot start the clock and cut honest workers' time to train; and, should a
// majority hang while heartbeating, kBackstopTimeouts x round_timeout_s after the round's
// first push whatever happens. Expected workers are the proven ones live when the round
// opened: a worker is proven by an accepted push, or by a valid push for the round that
// just closed (then it is expected from the next round on); it loses it by missing a round
// it was expected in, and each such miss doubles the rounds before a late push may prove
// it again. So ids that join and never push (sybils) cannot make rounds wait, and one that
// proves itself and then stalls holds only logarithmically few rounds open. A joiner in a
// running run may push at once but is waited for only once proven. While no live worker is proven (a cold start), every live worker and
// every joiner before the round's first push is expected. Anyone joined may push.
// Closing: each pushed Δ is screened (server/screen.h: clipped or left out when its norm is
// far above the round's robust statistics); g = mean of the screened Δ (or the majority
// vote of signs); outer SGD on θ_true; down = C(θ_true − θ_pub); θ_pub += decode(down).
// Summing on arrival: a push whose norm is at or below NormScreen::SafeBound (accepted
// unchanged however the round ends, counting every member yet to push and, while the round
// lacks its quorum, one newcomer per missing push) is summed at once and its payload
// dropped; only the others are held until the close (max_round_bytes bounds them), so a
// round costs one model-sized sum, not N payloads. So that the bound stays exact, an id that
// joins after a round's first such sum (a newcomer, or a worker rejoining after an eviction)
// may push in that round only while it lacks its quorum; otherwise from the next round on
// (FAILED_PRECONDITION, like a late push; a valid one proves it).
// θ_true − θ_pub is the downlink's error feedback. No peer input can make the engine abort:
// payloads are bounded at decode (kMaxAbsValue), and should the server's own downlink ever
// fail its check, the round's step is discarded (θ_true reset to θ_pub) instead.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/codec.h"
#include "common/histogram.h"
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
  std::vector<float> theta_true, theta_pub, momentum;
};

// Decoupled weight decay of one tensor: θ[offset, offset + numel) *= 1 - lr * rate.
struct DecayRange {
  size_t offset = 0, numel = 0;
  float rate = 0;
};

struct EngineOptions {
  size_t min_quorum = 1;             // pushes required before a round may close
  double round_timeout_s = 120;      // after half the expected workers pushed, stop waiting for the rest
  double heartbeat_timeout_s = 30;   // evict a worker silent for this long
  uint64_t total_rounds = 0;         // the run ends after this many rounds (0: never)
  size_t keep_rounds = 8;            // closed rounds kept for late AwaitRound calls
  uint64_t max_round_bytes = uint64_t{4} << 30;  // payload bytes held for one round's screening (kMean)
  std::vector<Segment> downlink;     // downlink encoding (empty: one dense fp32 segment)
  std::vector<Segment> uplink;       // the run's uplink codec: pushes in any other are refused (empty: any)
  OuterSgdOptions outer;
  ScreenOptions screen;              // kMean only: robust screening of each pushed Δ
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
};

// θ_pub at the start of the open round.
struct ModelSnapshot {
  uint64_t round = 0;
  uint64_t checksum = 0;
  std::shared_ptr<const std::vector<float>> params;
};

// Screening outcomes of one worker name (EngineStats::screened).
struct ScreenCounts {
  uint64_t clipped = 0, rejected = 0;
};

// Counters, in one place so metrics and logs read the same numbers.
struct EngineStats {
  uint64_t joins = 0, leaves = 0, evictions = 0, rounds_closed = 0;
  uint64_t pushes_accepted = 0, bytes_up = 0, bytes_down = 0;
  uint64_t summed_on_arrival = 0;  // kMean pushes summed at once (screening could not touch them), not held
  uint64_t held_bytes_peak = 0;    // the most payload bytes held for screening at once, over the run
  uint64_t rejected_unknown_worker = 0, rejected_wrong_round = 0, rejected_duplicate = 0,
           rejected_bad_payload = 0, rejected_round_full = 0;
  uint64_t downlink_resets = 0;  // rounds whose step was discarded because the downlink failed its check
  uint64_t stragglers = 0;       // expected workers missing when a round closed, summed over rounds
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
  std::map<std::string, ScreenCounts> screened;  // by worker name; at most kMaxScreenLabels names, then "other"
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
    uint64_t join_index;  // 0 for the first join since start: a stable, non-random data seed offset
  };
  // REQUIRES: `name` is safe to log and to use as a metric label (SafeName, common/log.h).
  Joined Join(const std::string& name);
  // NOT_FOUND for unknown or evicted workers (they must join again).
  absl::Status Heartbeat(uint64_t worker_id);
  absl::Status Leave(uint64_t worker_id);
  // Heartbeat that also records the worker's own counters (exported with its name).
  absl::Status Report(uint64_t worker_id, const WorkerStats& stats);

  // Validates and accumulates one worker's payload for `round`. NOT_FOUND (unknown worker),
  // FAILED_PRECONDITION (not the open round, or the run is over: resync), ALREADY_EXISTS
  // (second push in a round, also once that round closed), INVALID_ARGUMENT (bad payload),
  // RESOURCE_EXHAUSTED (the round holds max_round_bytes of payloads). A rejected push
  // changes nothing but the counters (and a worker's proof, see above).
  absl::Status Push(uint64_t worker_id, uint64_t round, absl::string_view payload);

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
  uint64_t OpenRound() const;
  bool IsMember(uint64_t worker_id) const;

 private:
  struct Member {
    std::string name;
    double last_seen = 0;
    bool proven = false;  // see the round rules at the top
    bool reported = false;
    WorkerStats stats;    // the last Report
    uint64_t next_round = 0;  // the round after its last accepted push
    uint32_t misses = 0;      // rounds in a row it was expected in and missed
    uint64_t reprove_after = 0;  // the first open round in which a late push proves it again
    uint64_t first_round = 0;    // the first round it may push in (see summing on arrival)
  };
  // A validated push held for screening at the close (kMean): its payload and Δ's L2 norm.
  struct Pending {
    uint64_t worker_id;
    std::string name;
    std::string payload;
    double norm;
  };

  void MaybeCloseLocked();
  EngineState ExportStateLocked() const;
  void CloseRoundLocked();
  void ForgetLocked(uint64_t worker_id);
  bool AnyProvenLocked() const;
  // Every accepted push's norm in the open round: summed ones, then held ones.
  std::vector<double> RoundNormsLocked() const;
  // The largest norm summed on arrival now, given the round's `norms` (the current push's
  // included), `pushed` pushes in and `unknown_members` members yet to push.
  double SafeNormLocked(const std::vector<double>& norms, size_t pushed, size_t unknown_members) const;
  // Sums every held push that SafeBound now clears into sum_ and drops its payload.
  void SumSafeLocked();
  // Screens what is still held and sums what passes into sum_; returns how many pushes
  // the round summed in all (on arrival too).
  size_t SumScreenedLocked();
  // Live workers that have not pushed in the open round (each may still push once).
  size_t UnpushedLocked() const;
  void CountScreenLocked(const std::string& name, bool rejected);
  // θ_pub += decode(C(θ_true − θ_pub)); returns the payload.
  std::shared_ptr<const std::string> PublishLocked();

  const EngineOptions options_;
  const Clock* const clock_;
  const size_t num_params_;
  const std::vector<Segment> downlink_;
  const int close_threads_;

  mutable std::mutex mu_;
  std::condition_variable round_closed_;
  OuterSgd outer_;                                     // guarded by mu_
  std::vector<float> theta_true_;                      // guarded by mu_
  std::shared_ptr<const std::vector<float>> theta_pub_;  // guarded by mu_; replaced, never mutated
  std::shared_ptr<std::vector<float>> spare_pub_;      // guarded by mu_; a retired θ_pub, reused once unread
  uint64_t pub_checksum_ = 0;                          // guarded by mu_
  uint64_t open_round_ = 0;                            // guarded by mu_
  bool done_ = false;                                  // guarded by mu_
  uint64_t next_worker_id_;                            // guarded by mu_; random start
  std::map<uint64_t, Member> members_;                 // guarded by mu_
  std::set<uint64_t> expected_;                        // guarded by mu_
  std::set<uint64_t> pushed_;                          // guarded by mu_
  std::vector<float> sum_;                             // guarded by mu_
  std::vector<Pending> pending_;                       // guarded by mu_; this round's held pushes, in arrival order
  std::vector<double> summed_norms_;                   // guarded by mu_; norms of the open round's pushes summed
                                                       // before its close (non-empty: newcomers wait, see the top)
  uint64_t pending_bytes_ = 0;                         // guarded by mu_
  NormScreen screen_;                                  // guarded by mu_
  std::vector<int32_t> votes_;                         // guarded by mu_ (kVote only)
  double first_push_time_ = -1;                        // guarded by mu_
  double straggler_clock_ = -1;                        // guarded by mu_; when half the expected had pushed
  double round_open_time_;                             // guarded by mu_
  Histogram round_durations_{DurationBuckets()};
  uint64_t round_bytes_up_ = 0;                        // guarded by mu_
  std::deque<RoundUpdate> history_;                    // guarded by mu_
  EngineStats stats_;                                  // guarded by mu_
};

}  // namespace muloco
