// The model-agnostic core of a worker: membership (Join with the worker's model, rejoin when
// evicted), the public model's replica, the uplink with error feedback, one round's exchange
// (push, wait, apply, resync on a recoverable failure), heartbeats with the worker's
// counters, and Leave. It knows a model only as a layout and a flat fp32 buffer, so any
// trainer drives it: muloco-worker's GPT (session.cc) and the Python package's user models
// (python/). Status policy: see session.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/model_layout.h"
#include "common/periodic.h"
#include "common/worker_stats.h"
#include "muloco/v1/muloco.pb.h"
#include "worker/replica.h"
#include "worker/retry.h"
#include "worker/transport.h"
#include "worker/uplink.h"
#include "worker/worker_options.h"

namespace muloco {

// A pushed round, for its counters and line once it closes.
struct PushedRound {
  uint64_t round = 0;
  size_t payload_bytes = 0;
  double train_loss = 0, train_s = 0;
  uint32_t steps = 1;   // inner steps it claims: what it was told to train (else H)
  uint64_t tokens = 0;  // training tokens it claims
  uint32_t extra = 0;   // async: steps trained past `steps` while the last push was in the air (unclaimed)
};

// What became of one round's push and wait (WorkerCore::Exchange).
struct Exchanged {
  enum Stage { kPush, kAwait, kApply };
  absl::Status status;  // OK: the update was applied; the replica is at result.next_round
  Stage stage = kPush;  // where it stopped when status is not OK
  RoundResult result;
};

class WorkerCore {
 public:
  // `model`: the worker's own tensors (names and shapes), sent at Join and checked by the
  // server; empty: the worker trains the run's built-in GPT, which must then be the run's
  // model. `transport` must outlive the core.
  WorkerCore(const WorkerOptions& o, Transport* transport, std::string token, ParamLayout model = {});
  ~WorkerCore();

  // Joins (retrying unavailable servers for timeout_s) and takes the run's configuration and
  // layout; a rejoin must find the same configuration.
  absl::Status Join(double timeout_s);
  // Fetches the public model; joins again first if the server no longer knows this worker.
  absl::Status Resync();
  // After the first Join: the uplink for the run's codec and heartbeats every heartbeat_s.
  absl::Status Begin();
  // One round's push (from version p.round, holding p.steps inner steps) and wait: Push
  // (ALREADY_EXISTS: an earlier try got through), commit the uplink's error feedback,
  // AwaitRound (both retried), apply the update to the replica; in an asynchronous run, every
  // round from p.round (the replica's version) up to the one the push counts in, in order.
  // Touches only the transport, the uplink and the replica (safe beside training).
  Exchanged Exchange(const std::string& payload, const PushedRound& p);
  // Acts on an exchange's outcome: counts and logs the closed round (true); after a
  // recoverable failure resyncs (false); anything else is returned.
  absl::StatusOr<bool> Settle(const Exchanged& x, const PushedRound& p, double wait_s);
  // An asynchronous run: rounds an exchange applies, at most, looking for its push's round
  // (more when the server's max_staleness is larger).
  static constexpr uint64_t kMaxVersionsToCount = 64;
  // Stops heartbeats and leaves the run (errors logged, not returned).
  void Leave();

  bool Stopping() const { return o_.stop_signal != nullptr && o_.stop_signal->load() != 0; }
  // Sleeps s seconds, or less when a stop signal comes. Returns !Stopping().
  bool Nap(double s);
  // muloco::Retry (worker/retry.h), napping through Nap so a stop signal ends it.
  template <typename F>
  auto Retry(F fn, double timeout_s) -> decltype(fn()) {
    return muloco::Retry(fn, timeout_s, [this](double s) { return Nap(s); }, tag_.c_str());
  }
  // Changes the counters that heartbeats and /metrics report.
  template <typename F>
  void Count(F change) {
    absl::MutexLock lock(&stats_mu_);
    change(stats_);
  }
  WorkerStats Stats() const {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }

  // The inner steps to take in the next local round: what the server's last heartbeat reply
  // told (--adaptive_h), else the run's H.
  uint32_t InnerSteps() const;

  const WorkerOptions& options() const { return o_; }
  Transport& transport() { return client_; }
  const std::string& tag() const { return tag_; }
  uint64_t id() const { return id_.load(); }
  uint64_t join_index() const { return join_index_; }  // of the first join: seeds the data order
  const v1::RunConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }  // the run's, with the server's groups
  size_t num_params() const { return n_; }
  uint64_t joined_round() const { return joined_round_; }
  uint64_t max_staleness() const { return max_staleness_.load(); }  // the run's (async; else 0)
  uint64_t joined_checksum() const { return joined_checksum_; }
  Replica& pub() { return pub_; }
  const Replica& pub() const { return pub_; }
  Uplink& uplink() { return *uplink_; }
  double wait_seconds() const { return wait_seconds_; }

 private:
  // Screening counted only part of the push whose round `r` is: the uplink's error feedback keeps the rest.
  void KeepUnlanded(const std::string& payload, const RoundResult& r);

  const WorkerOptions& o_;
  Transport& client_;
  const std::string token_;
  const ParamLayout model_;
  std::string name_, tag_;  // tag_: "worker NAME", prefixes every log line
  std::atomic<uint64_t> id_{0};
  uint64_t join_index_ = 0;
  v1::RunConfig config_;
  ParamLayout layout_;
  size_t n_ = 0;
  uint64_t joined_round_ = 0, joined_checksum_ = 0;  // the last Join's open round and θ_pub checksum
  std::atomic<uint64_t> max_staleness_{0};           // the run's (JoinResponse), async only; read by flights
  Replica pub_;
  std::unique_ptr<Uplink> uplink_;
  std::unique_ptr<PeriodicThread> heartbeat_;
  std::atomic<uint32_t> told_steps_{0};  // the server's last tell (0: none, or the run's H)
  double wait_seconds_ = 0;  // waited for the server (push, aggregation, downlink), in all
  mutable absl::Mutex stats_mu_;
  WorkerStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

// Overlap: one pushed round's exchange (WorkerCore::Exchange) running on its own thread while
// the next round trains; muloco-worker --overlap and ModelWorker both fly their pushes in one.
class Flight {
 public:
  void Launch(WorkerCore* core, const PushedRound& pushed, std::string payload);
  bool active() const { return future_.valid(); }
  const PushedRound& pushed() const { return pushed_; }
  // Whether it lands after the caller's inner step `steps` since the push: after exactly
  // `overlap_steps` (K > 0, waiting there if need be: the same trajectory whatever the
  // timing), else as soon as it has arrived.
  bool Due(uint32_t steps, uint32_t overlap_steps) const;
  // Waits for it and ends it; adds the seconds waited to *waited_s.
  Exchanged Land(double* waited_s);
  // Waits for it and ends it, its outcome dropped (cancel the core's awaits first to hurry it).
  void Drop() {
    if (active()) future_.get();
  }

 private:
  std::future<Exchanged> future_;
  PushedRound pushed_;
};

}  // namespace muloco
