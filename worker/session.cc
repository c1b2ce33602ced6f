// RunWorker (see session.h). Status policy: the transient codes (worker/retry.h) retry with backoff;
// FAILED_PRECONDITION, a refused push (INVALID_ARGUMENT), a checksum mismatch or a model
// gone non-finite resync by fetching the model; NOT_FOUND (evicted) joins again;
// ALREADY_EXISTS on a push means an earlier attempt got through. Anything else (a refused
// token or session, a bad config) ends the worker with the error. A stop signal
// (WorkerOptions::stop_signal) is checked between inner steps, between retries and while
// awaiting a round; the worker then leaves without pushing the round in progress.
#include "worker/session.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <future>
#include <limits>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/histogram.h"
#include "codec/checksum.h"
#include "codec/codec.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "common/version.h"
#include "common/worker_stats.h"
#include "worker/client.h"
#include "worker/data.h"
#include "worker/evaluate.h"
#include "worker/replica.h"
#include "worker/retry.h"
#include "common/periodic.h"
#include "worker/trainer.h"
#include "worker/uplink.h"

namespace muloco {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

const char* SignalName(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

// "HH:MM:SSZ" (UTC), `in_s` seconds from now.
std::string UtcClockIn(double in_s) {
  const auto at = std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(in_s * 1000));
  const std::time_t t = std::chrono::system_clock::to_time_t(at);
  std::tm utc;
  gmtime_r(&t, &utc);
  char out[16];
  std::snprintf(out, sizeof out, "%02d:%02d:%02dZ", utc.tm_hour, utc.tm_min, utc.tm_sec);
  return out;
}

// Progress of one round's local training, logged at most every period_s (0: never), never
// for the last step (the round's own line follows).
class RoundProgress {
 public:
  RoundProgress(const std::string& tag, double period_s, uint64_t round, uint32_t steps, uint64_t tokens_per_step)
      : tag_(tag), period_s_(period_s), round_(round), steps_(steps), tokens_per_step_(tokens_per_step) {}

  void AfterStep(uint32_t done) {
    if (!(period_s_ > 0) || done >= steps_) return;
    const double elapsed = Seconds(std::chrono::steady_clock::now() - start_);
    if (elapsed < next_s_) return;
    next_s_ = elapsed + period_s_;
    const double left_s = elapsed / done * (steps_ - done);
    Logf(tag_.c_str(),
         "round %llu: step %u/%u (%.0f%%), %.0f tokens/s, %.1f s in, local training ends in %.1f s (at %s)",
         static_cast<unsigned long long>(round_), done, steps_, 100.0 * done / steps_,
         static_cast<double>(done) * tokens_per_step_ / elapsed, elapsed, left_s, UtcClockIn(left_s).c_str());
  }

 private:

  const std::string& tag_;
  const double period_s_;
  const uint64_t round_;
  const uint32_t steps_;
  const uint64_t tokens_per_step_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double next_s_ = period_s_;  // seconds after start_ of the next line
};

// A pushed round, for its line once it closes.
struct PushedRound {
  uint64_t round = 0;
  size_t payload_bytes = 0;
  double train_loss = 0, train_s = 0;
  uint32_t steps = 1;  // inner steps it trained
};

// What became of one round's push and wait (WorkerSession::Exchange).
struct Exchanged {
  enum Stage { kPush, kAwait, kApply };
  absl::Status status;  // OK: the update was applied; the replica is at result.next_round
  Stage stage = kPush;  // where it stopped when status is not OK
  RoundResult result;
};

ClientOptions ClientOptionsFor(const WorkerOptions& o) {
  ClientOptions c;
  c.tls_server_name = o.tls_server_name;
  c.stall_timeout_s = o.stall_timeout_s;
  c.chunk_bytes = o.chunk_bytes;
  c.heartbeat_timeout_s = std::min(10.0, o.heartbeat_s);
  return c;
}

}  // namespace

// One worker's connection state: id, configuration, public model; rejoin and resync live here.
class WorkerSession {
 public:
  WorkerSession(const WorkerOptions& o, Transport* transport, std::string token)
      : o_(o), client_(*transport), token_(std::move(token)) {
    name_ = o.name.empty() ? absl::StrCat("worker-", getpid()) : o.name;
    tag_ = absl::StrCat("worker ", SafeName(name_));
  }

  int Run();

 private:
  // One round's local training (Train).
  struct Trained {
    double loss = 0, seconds = 0;
    absl::StatusOr<bool> keep = true;  // false: the round's training is dropped (overlap: resynced or done)
  };

  // Join, data, trainer, uplink, heartbeats and the first model fetch; an exit code when the
  // run cannot start (nullopt: it goes on).
  std::optional<int> Start();
  // A fresh trainer (model, optimizers) on this worker's data order.
  std::unique_ptr<Trainer> NewTrainer() const {
    return std::make_unique<Trainer>(config_, &*corpus_, config_.data_seed() + join_index_, o_.device, &layout_);
  }
  // Evaluates the public model every eval_every rounds, and always when `final`; with
  // --defer_eval, writes it to a file there instead (and evaluates it too when `final`, or
  // when the file cannot be written).
  void MaybeEvaluate(bool final = false);
  // The run ends for this worker after `x`: the final round closed, or --leave_after.
  bool Finished(const Exchanged& x);
  // Overlap: ends the exchange in flight. Once its update is applied, the trainer's
  // parameters move onto the new public model keeping the progress made since the push:
  // θ ← θ_pub + (θ − θ_push); the next pseudo-gradient θ_pub − θ_end then counts only that
  // progress. Returns whether training goes on (false: resynced, or this worker is done).
  absl::StatusOr<bool> Land();
  // Trains round r from the public model, or (continuing, with --overlap) on from where the
  // last round's training left off; an update in flight lands between steps (Land).
  Trained Train(uint64_t r, bool continuing);
  // Whether the trained update may be pushed. A non-finite or out-of-range one (or an
  // injected fault) resets the optimizer and resyncs (false), and is an error after three
  // rounds in a row.
  absl::StatusOr<bool> Sound(uint64_t r);
  // Encodes and pushes round r: with --overlap its exchange flies beside the next round's
  // training; otherwise it is exchanged and settled here. CANCELLED on a stop signal.
  absl::Status Push(uint64_t r, const Trained& t);
  // The final evaluation, Leave, --save_final, and the final lines. Returns the exit code.
  int Finish();
  absl::Status Join(double timeout_s);
  absl::Status Resync();
  // Start, right after the first Join, when it said round 0 (and --init_from_seed): builds
  // the initial model from the run config's init_seed and keeps it when its checksum is the
  // one the server sent (true); otherwise (another build's random numbers, a resumed run)
  // Start fetches the model. If round 0 closes meanwhile (a late joiner), the first push is
  // refused as late and the worker fetches then, as after any late push.
  bool BuildSeededModel(uint64_t server_checksum);
  // Ends the run with an error (or, when a stop signal came meanwhile, with Stop()).
  int Fail(const absl::Status& s);
  // Leaves on a stop signal; the round in progress is dropped, the exchange in flight (if
  // any) is waited for (its await is cancelled). Returns 0.
  int Stop();
  // One round's push and wait: Push (ALREADY_EXISTS: an earlier try got through), commit
  // the uplink's error feedback, AwaitRound (both retried), apply the update to the replica.
  // On the main thread, or with --overlap beside the next round's training; it touches only
  // the transport, *uplink_ and pub_ (which the main thread leaves alone meanwhile).
  Exchanged Exchange(uint64_t round, const std::string& payload, float train_loss);
  // Acts on an exchange's outcome: counts and logs the closed round (true); after a
  // recoverable failure resyncs (false); anything else is returned, for Fail.
  absl::StatusOr<bool> Settle(const Exchanged& x, const PushedRound& p, double wait_s);
  bool Stopping() const { return o_.stop_signal != nullptr && o_.stop_signal->load() != 0; }
  // Sleeps s seconds, or less when a stop signal comes. Returns !Stopping().
  bool Nap(double s);
  // muloco::Retry (worker/retry.h), napping through Nap so a stop signal ends it.
  template <typename F>
  auto Retry(F fn, double timeout_s) -> decltype(fn()) {
    return muloco::Retry(fn, timeout_s, [this](double s) { return Nap(s); }, tag_.c_str());
  }
  // The end-of-run table: rounds, tokens, throughput, bytes, validation loss, wall time.
  void LogSummary() const;
  // Changes the counters that /metrics reports (only this thread writes them).
  template <typename F>
  void Count(F change) {
    absl::MutexLock lock(&stats_mu_);
    change(stats_);
  }
  WorkerStats Stats() const {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }

  const WorkerOptions& o_;
  Transport& client_;
  const std::string token_;
  std::string name_, tag_;  // tag_: "worker NAME", prefixes every log line
  std::atomic<uint64_t> id_{0};
  uint64_t join_index_ = 0;  // of the first join: seeds this worker's data order
  v1::RunConfig config_;
  ParamLayout layout_;  // the run's, from Join: the GPT's tensors with the server's optimizer groups
  uint64_t joined_round_ = 0, joined_checksum_ = 0;  // the last Join's open round and θ_pub checksum
  Replica pub_;
  mutable absl::Mutex stats_mu_;
  WorkerStats stats_ ABSL_GUARDED_BY(stats_mu_);  // for the metrics endpoint's reads
  // For the summary (this thread only).
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double train_seconds_ = 0;                // in local training, rounds that were pushed or refused
  double wait_seconds_ = 0;                 // training waited for the server (push, aggregation, downlink)
  uint64_t tokens_per_round_ = 0;
  double first_val_ = -1, last_val_ = -1;   // validation losses (-1: none yet)
  uint64_t n_ = 0;                          // parameters of the model (for size notes)
  Histogram inner_steps_{DurationBuckets()};  // thread-safe: the metrics endpoint reads it
  // The run (Run), set up by Start. Declared before in_flight_, so that an exchange still in
  // flight when the session ends (an exception) finishes while these serve it.
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<PeriodicThread> stop_watcher_;  // cancels awaits on a stop signal
  std::optional<Corpus> corpus_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<Uplink> uplink_;
  std::unique_ptr<PeriodicThread> heartbeat_;
  bool signmuon_ = false, overlap_ = false;
  uint64_t tokens_per_step_ = 0;
  uint64_t last_eval_ = ~uint64_t{0};  // round of the last evaluation
  std::future<Exchanged> in_flight_;   // overlap: the last pushed round's exchange, while the next trains
  PushedRound flying_;                 // what in_flight_ pushed
  bool done_ = false;                  // the run is over for this worker
  double wait_s_ = 0;                  // this round's training waited this long for the server
  uint32_t steps_done_ = 0;            // of the round training now
  int bad_rounds_ = 0;                 // rejected updates in a row (Sound)
  uint32_t injected_faults_ = 0;       // --fault_nonfinite_rounds so far
};

bool WorkerSession::Nap(double s) {
  constexpr double kSlice = 0.05;  // how soon a stop signal is noticed
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  while (!Stopping()) {
    const double left = std::chrono::duration<double>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return true;
    client_.Pause(std::min(left, kSlice));
  }
  return false;
}

namespace {

// The run's layout from Join, which must be the built-in GPT of its config, tensor by tensor
// and in the same order (a user's model is trained by the Python package). A server that
// sends no layout runs the config's GPT.
absl::StatusOr<ParamLayout> RunLayout(const v1::JoinResponse& joined) {
  const ParamLayout gpt = GptLayout(joined.config().model());
  ParamLayout run = gpt;
  if (joined.layout().tensors_size() > 0) {
    absl::StatusOr<ParamLayout> sent = LayoutFromProto(joined.layout());
    if (!sent.ok()) return absl::InvalidArgumentError(absl::StrCat("server sent a bad layout: ", sent.status().message()));
    std::string difference = LayoutDifference(*sent, gpt);
    for (size_t i = 0; difference.empty() && i < gpt.size(); ++i) {
      if ((*sent)[i].name != gpt[i].name) difference = absl::StrCat("tensor ", gpt[i].name, " is elsewhere in its order");
    }
    if (!difference.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the run's model is not the built-in GPT this worker trains (", difference,
          "); train it with muloco's Python package"));
    }
    run = *std::move(sent);
  }
  if (joined.num_params() != TotalParams(run)) {
    return absl::InvalidArgumentError("server's parameter count does not match its model");
  }
  return run;
}

}  // namespace

absl::Status WorkerSession::Join(double timeout_s) {
  absl::StatusOr<v1::JoinResponse> joined = Retry([&] { return client_.Join(name_, token_); }, timeout_s);
  if (!joined.ok()) return joined.status();
  if (id_ != 0 && joined->config().SerializeAsString() != config_.SerializeAsString()) {
    return absl::FailedPreconditionError("the server now runs a different configuration");
  }
  if (absl::Status s = ValidateRunConfig(joined->config()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("server sent a bad config: ", s.message()));
  }
  absl::StatusOr<ParamLayout> layout = RunLayout(*joined);
  if (!layout.ok()) {
    client_.Leave(joined->worker_id()).IgnoreError();  // never expected in a round it cannot train
    return layout.status();
  }
  layout_ = *std::move(layout);
  if (id_ == 0) join_index_ = joined->join_index();
  config_ = joined->config();
  if (!o_.defer_eval.empty()) {  // --evaluate=DIR finds the run's configuration here
    if (absl::Status s = WriteFileAtomic(DeferredConfigPath(o_.defer_eval), RunConfigText(config_)); !s.ok()) {
      LogWarn(tag_.c_str(), "--defer_eval: %s", s.ToString().c_str());
    }
  }
  joined_round_ = joined->round();
  joined_checksum_ = joined->model_checksum();
  id_ = joined->worker_id();
  Logf(tag_.c_str(), "joined %s as %s (id %llu) at round %llu: %s", client_.Describe().c_str(), name_.c_str(),
       static_cast<unsigned long long>(id_.load()), static_cast<unsigned long long>(joined->round()),
       DescribeRunConfig(config_).c_str());
  return absl::OkStatus();
}

bool WorkerSession::BuildSeededModel(uint64_t checksum) {
  FetchedModel m{0, checksum, InitParams(config_.model(), GptLayout(config_.model()))};
  const uint64_t built = ParamChecksum(m.params.data(), m.params.size());
  if (built != checksum) {
    Logf(tag_.c_str(), "the model built from init_seed %llu has checksum %016llx, the server's is %016llx: fetching it",
         static_cast<unsigned long long>(config_.model().init_seed()), static_cast<unsigned long long>(built),
         static_cast<unsigned long long>(checksum));
    return false;
  }
  pub_.Reset(std::move(m));
  Count([&](WorkerStats& st) { st.round = pub_.round(); });
  Logf(tag_.c_str(), "built model at round %llu (%zu parameters) from init_seed %llu: checksum %016llx is the server's, "
       "nothing fetched", static_cast<unsigned long long>(pub_.round()), pub_.size(),
       static_cast<unsigned long long>(config_.model().init_seed()), static_cast<unsigned long long>(built));
  return true;
}

// Fetches the public model; joins again first if the server no longer knows this worker.
absl::Status WorkerSession::Resync() {
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

int WorkerSession::Fail(const absl::Status& s) {
  if (Stopping()) return Stop();
  LogError(tag_.c_str(), "%s", s.ToString().c_str());
  heartbeat_.reset();  // none after Leave
  client_.Leave(id_.load()).IgnoreError();
  return 1;
}

int WorkerSession::Stop() {
  if (in_flight_.valid()) in_flight_.wait();
  Logf(tag_.c_str(), "leaving: %s at round %llu", SignalName(o_.stop_signal->load()),
       static_cast<unsigned long long>(pub_.round()));
  if (id_ == 0) return 0;  // never joined
  heartbeat_.reset();        // none after Leave
  if (absl::Status s = client_.Leave(id_.load()); !s.ok()) {
    LogWarn(tag_.c_str(), "Leave failed (%s); the server will evict this worker", s.ToString().c_str());
  }
  LogSummary();
  return 0;
}

void WorkerSession::LogSummary() const {
  const char* tag = tag_.c_str();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const auto per_s = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  const WorkerStats stats = Stats();
  // "N bytes (Rx smaller than dense fp32, B bits/param)", over the rounds done.
  const auto bytes = [&](uint64_t b) {
    return b == 0 ? absl::StrCat(b, " bytes") : absl::StrCat(b, " bytes (", SizeNote(b, stats.rounds_done, n_), ")");
  };
  Logf(tag, "summary: %-10s %llu", "rounds", static_cast<unsigned long long>(stats.rounds_done));
  Logf(tag, "summary: %-10s %llu (%.0f tokens/s while training, %.0f overall)", "tokens",
       static_cast<unsigned long long>(stats.tokens), per_s(stats.tokens, train_seconds_),
       per_s(stats.tokens, wall_s));
  Logf(tag, "summary: %-10s %s", "up", bytes(stats.bytes_up).c_str());
  Logf(tag, "summary: %-10s %s", "down", bytes(stats.bytes_down).c_str());
  Logf(tag, "summary: %-10s %.4f first, %.4f last", "val_loss", first_val_, last_val_);
  Logf(tag, "summary: %-10s %.1f s (%.1f s training, %.1f s waiting for the server)", "wall time", wall_s,
       train_seconds_, wait_seconds_);
}

int WorkerSession::Run() {
  bool metrics_failed = false;
  metrics_ = StartMetricsOrReport(
      o_.metrics_listen, "worker",
      [this] {
        std::vector<MetricSample> m = WorkerMetrics(Stats());
        m.push_back({"muloco_build_info", "1, labelled with this build's version", false, 1.0,
                     {{"version", MulocoVersion()}}});
        m.push_back(HistogramSample("muloco_worker_inner_step_duration_seconds",
                                    "Seconds per inner optimizer step (forward, backward, update)",
                                    inner_steps_.Snapshot()));
        return m;
      },
      &metrics_failed);
  if (metrics_failed) return 2;
  // Cancels a round's long poll at once on a stop signal (checks elsewhere are between steps;
  // polled: a signal handler can only set a flag).
  if (o_.stop_signal != nullptr) {
    stop_watcher_ = std::make_unique<PeriodicThread>(0.05, [this] {
      if (o_.stop_signal->load() == 0) return true;
      client_.CancelAwaits();
      return false;
    });
  }
  if (std::optional<int> code = Start()) return *code;  // could not start (or stopped): the exit code
  while (!done_) {
    if (Stopping()) return Stop();
    const bool continuing = in_flight_.valid();
    const uint64_t r = continuing ? flying_.round + 1 : pub_.round();
    if (!continuing) {
      if (r >= config_.total_rounds()) break;  // resynced after the run ended: the final model is ours
      MaybeEvaluate();
    }
    Trained t = Train(r, continuing);
    if (Stopping()) return Stop();  // never push a partial round
    if (t.keep.ok() && *t.keep && in_flight_.valid()) t.keep = Land();
    if (!t.keep.ok()) return Fail(t.keep.status());
    if (!*t.keep || done_ || r >= config_.total_rounds()) continue;
    train_seconds_ += t.seconds;
    if (continuing) trainer_->DeltaFrom(pub_.params().data());  // rebased: Δ = θ_pub − θ_end
    absl::StatusOr<bool> sound = Sound(r);
    if (!sound.ok()) return Fail(sound.status());
    if (!*sound) continue;
    if (absl::Status s = Push(r, t); !s.ok()) return Fail(s);
  }
  return Finish();
}

std::optional<int> WorkerSession::Start() {
  if (absl::Status s = Join(o_.connect_timeout_s); !s.ok()) {
    if (Stopping()) return Stop();
    LogError(tag_.c_str(), "cannot join %s: %s", client_.Describe().c_str(), s.ToString().c_str());
    return 1;
  }
  // At once, so that round 0 is as unlikely as can be to close before this worker trains it.
  const bool built = o_.init_from_seed && joined_round_ == 0 && BuildSeededModel(joined_checksum_);
  absl::StatusOr<Corpus> corpus =
      LoadCorpus(o_.data, o_.val_data, config_.model().vocab_size(), config_.model().context());
  if (!corpus.ok()) return Fail(absl::InvalidArgumentError(absl::StrCat("data: ", corpus.status().message())));
  corpus_.emplace(*std::move(corpus));
  Logf(tag_.c_str(), "data %s; device %s", corpus_->description.c_str(), o_.device.Name().c_str());
  trainer_ = NewTrainer();
  const ParamLayout& layout = layout_;
  n_ = TotalParams(layout);
  signmuon_ = KindsOf(config_).mode == RunMode::kSignMuon;
  overlap_ = o_.overlap && !signmuon_;
  if (o_.overlap && signmuon_) {
    LogWarn(tag_.c_str(), "--overlap: SignMuon takes one step per round, nothing to overlap; running without it");
  }
  uplink_ = std::make_unique<Uplink>(PlanSegments(CodecShapes(layout), *ParseCodec(config_.uplink_codec())), signmuon_,
                                     config_.ef_beta(), n_, config_.data_seed() + join_index_, o_.device);
  if (!uplink_->status().ok()) return Fail(uplink_->status());
  // Heartbeats for the current id (it changes on a rejoin) with the worker's counters; a
  // failure shows up on the next real call.
  heartbeat_ = std::make_unique<PeriodicThread>(o_.heartbeat_s, [this] {
    client_.Heartbeat(id_.load(), ToReport(Stats())).IgnoreError();
    return true;
  });
  if (!built) {
    if (absl::Status s = Resync(); !s.ok()) return Fail(s);
  }
  tokens_per_step_ = uint64_t{config_.batch_size()} * config_.model().context();
  tokens_per_round_ = (signmuon_ ? 1 : config_.inner_steps()) * tokens_per_step_;
  return std::nullopt;
}

void WorkerSession::MaybeEvaluate(bool final) {
  const uint64_t r = pub_.round();
  const bool due = config_.eval_every() && r % config_.eval_every() == 0 && r != last_eval_;
  if (!due && !final) return;
  last_eval_ = r;
  if (!o_.defer_eval.empty()) {  // the final model is written too, and evaluated for the summary
    const std::string path = DeferredEvalPath(o_.defer_eval, r);
    if (absl::Status s = WriteFloatsAtomic(path, pub_.params()); s.ok()) {
      Logf(tag_.c_str(), "eval: round %llu deferred to %s", static_cast<unsigned long long>(r), path.c_str());
      if (!final) return;
    } else {
      LogWarn(tag_.c_str(), "--defer_eval: %s; evaluating round %llu here instead", s.ToString().c_str(),
              static_cast<unsigned long long>(r));
    }
  }
  last_val_ = trainer_->Evaluate(pub_.params().data());
  Count([&](WorkerStats& st) { st.val_loss = last_val_; });
  if (first_val_ < 0) first_val_ = last_val_;
  Logf(tag_.c_str(), "eval: round %llu val_loss %.4f", static_cast<unsigned long long>(r), last_val_);
}

bool WorkerSession::Finished(const Exchanged& x) {
  if (x.result.done) return true;
  const uint64_t rounds = Stats().rounds_done;
  if (!o_.leave_after || rounds < o_.leave_after) return false;
  Logf(tag_.c_str(), "leaving after %llu rounds (--leave_after)", static_cast<unsigned long long>(rounds));
  return true;
}

absl::StatusOr<bool> WorkerSession::Land() {
  const auto t0 = std::chrono::steady_clock::now();
  const Exchanged x = in_flight_.get();
  wait_s_ += Seconds(std::chrono::steady_clock::now() - t0);
  absl::StatusOr<bool> applied = Settle(x, flying_, wait_s_);
  if (!applied.ok() || !*applied) return applied;
  if (Finished(x)) {
    done_ = true;
    return false;
  }
  trainer_->Rebase(pub_.params().data());
  Logf(tag_.c_str(), "round %llu: rebased onto round %llu's model after %u of %u steps",
       static_cast<unsigned long long>(flying_.round + 1), static_cast<unsigned long long>(pub_.round()), steps_done_,
       config_.inner_steps());
  MaybeEvaluate();
  return true;
}

WorkerSession::Trained WorkerSession::Train(uint64_t r, bool continuing) {
  Trained t;
  wait_s_ = 0;
  steps_done_ = 0;
  if (r >= config_.total_rounds()) return t;
  const auto train_start = std::chrono::steady_clock::now();
  RoundProgress progress(tag_, o_.progress_s, r, config_.inner_steps(), tokens_per_step_);
  auto step_start = train_start;
  auto after_step = [&](uint32_t steps) {
    const auto now = std::chrono::steady_clock::now();
    inner_steps_.Observe(Seconds(now - step_start));
    step_start = now;
    steps_done_ = steps;
    progress.AfterStep(steps);
    // The update lands as soon as it arrives, or (--overlap_steps=K) after exactly K steps,
    // waiting for it there if need be: the same trajectory whatever the timing.
    const bool land_now =
        in_flight_.valid() && (o_.overlap_steps ? steps == o_.overlap_steps
                                                : in_flight_.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
    if (land_now) {
      t.keep = Land();  // the update arrived mid-round: rebase now
      if (!t.keep.ok() || !*t.keep) return false;
    }
    return !Stopping();
  };
  if (signmuon_) {
    t.loss = trainer_->SignDirection(pub_.params().data());
    inner_steps_.Observe(Seconds(std::chrono::steady_clock::now() - train_start));
  } else if (continuing) {
    t.loss = trainer_->TrainSteps(r * config_.inner_steps(), after_step);
  } else {
    t.loss = trainer_->TrainRound(pub_.params().data(), r * config_.inner_steps(), after_step);
  }
  t.seconds = Seconds(std::chrono::steady_clock::now() - train_start);
  return t;
}

absl::StatusOr<bool> WorkerSession::Sound(uint64_t r) {
  constexpr int kMaxBadRounds = 3;
  if (injected_faults_ < o_.fault_nonfinite_rounds) {
    ++injected_faults_;
    trainer_->delta().Set(0, std::numeric_limits<float>::quiet_NaN());
  }
  if (trainer_->delta().AllWithin(kMaxAbsValue)) {
    bad_rounds_ = 0;
    return true;
  }
  LogWarn(tag_.c_str(), "round %llu: the update is non-finite or out of range; resetting the optimizer and resyncing",
          static_cast<unsigned long long>(r));
  if (++bad_rounds_ >= kMaxBadRounds) {
    return absl::InternalError(absl::StrCat("training gave non-finite or out-of-range updates ", bad_rounds_,
                                            " rounds in a row from the server's model: lower the learning rate"));
  }
  trainer_ = NewTrainer();
  uplink_->Reset();
  if (absl::Status s = Resync(); !s.ok()) return s;
  return false;
}

absl::Status WorkerSession::Push(uint64_t r, const Trained& t) {
  absl::StatusOr<std::string> encoded = uplink_->Encode(trainer_->delta().data(), r);
  if (!encoded.ok()) return encoded.status();  // the device failed mid-run
  std::string payload = *std::move(encoded);
  const PushedRound pushed{r, payload.size(), t.loss, t.seconds, signmuon_ ? 1 : config_.inner_steps()};
  if (overlap_) {  // train the next round while this one is pushed, aggregated and sent back
    trainer_->MarkPush();
    flying_ = pushed;
    in_flight_ = std::async(std::launch::async, [this, r, payload = std::move(payload), loss = t.loss] {
      return Exchange(r, payload, static_cast<float>(loss));
    });
    return absl::OkStatus();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Exchanged x = Exchange(r, payload, static_cast<float>(t.loss));
  if (Stopping()) return absl::CancelledError("stop signal");  // Fail leaves through Stop
  absl::StatusOr<bool> applied = Settle(x, pushed, Seconds(std::chrono::steady_clock::now() - t0));
  if (!applied.ok()) return applied.status();
  done_ = *applied && Finished(x);
  return absl::OkStatus();
}

int WorkerSession::Finish() {
  MaybeEvaluate(/*final=*/true);
  heartbeat_.reset();
  client_.Leave(id_.load()).IgnoreError();
  if (!o_.save_final.empty()) {
    if (absl::Status s = WriteFloatsAtomic(o_.save_final, pub_.params()); !s.ok()) return Fail(s);
  }
  const WorkerStats stats = Stats();
  Logf(tag_.c_str(),
       "final: val_loss %.4f (start %.4f) after %llu rounds; up %llu bytes, down %llu bytes; checksum %016llx",
       last_val_, first_val_, static_cast<unsigned long long>(stats.rounds_done),
       static_cast<unsigned long long>(stats.bytes_up), static_cast<unsigned long long>(stats.bytes_down),
       static_cast<unsigned long long>(pub_.checksum()));
  LogSummary();
  return 0;
}

Exchanged WorkerSession::Exchange(uint64_t round, const std::string& payload, float train_loss) {
  Exchanged x;
  absl::Status pushed = Retry([&] { return client_.Push(id_.load(), round, payload, train_loss); }, o_.retry_timeout_s);
  // An earlier attempt of this push got through (its reply was lost): the server has it.
  if (pushed.code() == absl::StatusCode::kAlreadyExists) pushed = absl::OkStatus();
  if (!pushed.ok()) {
    x.status = pushed;
    return x;
  }
  uplink_->Commit();
  x.stage = Exchanged::kAwait;
  absl::StatusOr<RoundResult> result = Retry([&] { return client_.AwaitRound(id_.load(), round); }, o_.retry_timeout_s);
  if (!result.ok()) {
    x.status = result.status();
    return x;
  }
  x.result = *std::move(result);
  if (!x.result.landed.empty()) {  // screening counted only part of the push: e keeps the rest
    size_t cut = 0;
    for (const LandedRange& l : x.result.landed) cut += l.fraction < 1.0f;
    if (absl::Status s = uplink_->KeepUnlanded(payload, x.result.landed); !s.ok()) {
      LogWarn(tag_.c_str(), "round %llu: the server's screening note is unusable (%s)",
              static_cast<unsigned long long>(round), std::string(s.message()).c_str());
    } else {
      Logf(tag_.c_str(), "round %llu: the server's screening counted part of this push (%zu ranges); "
           "error feedback keeps the rest", static_cast<unsigned long long>(round), cut);
    }
  }
  x.stage = Exchanged::kApply;
  x.status = pub_.Apply(x.result);
  return x;
}

absl::StatusOr<bool> WorkerSession::Settle(const Exchanged& x, const PushedRound& p, double wait_s) {
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
    st.tokens += tokens_per_round_;
    st.train_loss = p.train_loss;
    st.ef_residual_norm = uplink_->ResidualNorm();
    st.inner_step_seconds = p.train_s / p.steps;
    st.tokens_per_second = p.train_s > 0 ? tokens_per_round_ / p.train_s : 0;
    st.wait_seconds = wait_s;
  });
  wait_seconds_ += wait_s;
  Logf(tag_.c_str(),
       "round %llu: train_loss %.4f, up %zu bytes (%s), down %zu bytes (%s), %u contributors, trained %.2f s, "
       "waited %.2f s, checksum %016llx ok",
       r, p.train_loss, p.payload_bytes, SizeNote(p.payload_bytes, 1, n_).c_str(), u.payload.size(),
       SizeNote(u.payload.size(), 1, n_).c_str(), u.contributors, p.train_s, wait_s,
       static_cast<unsigned long long>(pub_.checksum()));
  return true;
}

int RunWorker(const WorkerOptions& o) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = MakeChannelCredentials(o.tls);
  if (!creds.ok()) {
    std::fprintf(stderr, "muloco-worker: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  std::string token;
  if (!o.token_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(o.token_file);
    if (text.ok()) token = std::string(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
    if (token.empty()) {
      std::fprintf(stderr, "muloco-worker: --token_file=%s: cannot read a token there\n", o.token_file.c_str());
      return 2;
    }
  }
  ServerClient client(o.server, *std::move(creds), ClientOptionsFor(o));
  return RunWorkerOver(o, &client, token);
}

int RunWorkerOver(const WorkerOptions& o, Transport* transport, const std::string& token) {
  try {
    return WorkerSession(o, transport, token).Run();
  } catch (const std::exception& e) {  // LibTorch reports a failing device (CUDA errors, out of memory) by throwing
    LogError("worker", "training failed on %s: %s", o.device.Name().c_str(), e.what());
    return 1;
  }
}

}  // namespace muloco
