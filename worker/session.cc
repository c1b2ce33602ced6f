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
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
#include "worker/core.h"
#include "worker/data.h"
#include "worker/evaluate.h"
#include "worker/local_state.h"
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

// Names a run's configuration in a --state_file.
uint64_t RunChecksum(const v1::RunConfig& config) {
  const std::string text = RunConfigText(config);
  return Checksum64(text.data(), text.size());
}

}  // namespace

// One worker's connection state: id, configuration, public model; rejoin and resync live here.
class WorkerSession {
 public:
  WorkerSession(const WorkerOptions& o, Transport* transport, std::string token)
      : o_(o), core_(o, transport, std::move(token)), config_(core_.config()), pub_(core_.pub()), tag_(core_.tag()) {}

  int Run();

 private:
  // One round's local training (Train).
  struct Trained {
    double loss = 0, seconds = 0;
    double copy_seconds = 0;  // of `seconds`: loading θ_pub into the model and computing Δ
    absl::StatusOr<bool> keep = true;  // false: the round's training is dropped (overlap: resynced or done)
  };

  // Join, data, trainer, uplink, heartbeats and the first model fetch; an exit code when the
  // run cannot start (nullopt: it goes on).
  std::optional<int> Start();
  // A fresh trainer (model, optimizers) on this worker's data order.
  std::unique_ptr<Trainer> NewTrainer() const {
    return std::make_unique<Trainer>(config_, &*corpus_, config_.data_seed() + core_.join_index(), o_.device, &core_.layout());
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
  // progress. Returns whether training goes on (false: resynced in a synchronous run, or this worker
  // is done).
  absl::StatusOr<bool> Land();
  // After a flight ended in a resync (its push refused or lost): in an asynchronous run the
  // round in training moves onto the fetched model as onto a landed update (true); when the
  // push never got in (`push_refused`: too stale, or the server had forgotten this worker)
  // its own steps carry on with it, counted in the round's steps; a push that got in but
  // whose round was lost is not carried (it may have counted). A synchronous run starts its
  // next round afresh (false).
  bool KeepAfterResync(bool push_refused);
  // Trains round r from the public model, or (continuing, with --overlap) on from where the
  // last round's training left off; an update in flight lands between steps (Land).
  Trained Train(uint64_t r, bool continuing);
  // Whether the trained update may be pushed. A non-finite or out-of-range one (or an
  // injected fault) resets the optimizer and resyncs (false), and is an error after three
  // rounds in a row.
  absl::StatusOr<bool> Sound(uint64_t r);
  // Round r's update (the trainer's delta) encoded for its push, from the replica's version in
  // an asynchronous run, and the push's record: it claims round_steps_, the steps trained
  // past them extra (unclaimed).
  absl::StatusOr<std::pair<std::string, PushedRound>> Encode(uint64_t r, const Trained& t);
  // Encodes and pushes round r: with --overlap its exchange flies beside the next round's
  // training; otherwise it is exchanged and settled here. CANCELLED on a stop signal.
  absl::Status Push(uint64_t r, const Trained& t);
  // The final evaluation, Leave, --save_final, and the final lines. Returns the exit code.
  int Finish();
  // Start, right after the first Join, when it said round 0 (and --init_from_seed): builds
  // the initial model from the run config's init_seed and keeps it when its checksum is the
  // one the server sent (true); otherwise (another build's random numbers, a resumed run)
  // Start fetches the model. If round 0 closes meanwhile (a late joiner), the first push is
  // refused as late and the worker fetches then, as after any late push.
  bool BuildSeededModel(uint64_t server_checksum);
  bool Stopping() const { return core_.Stopping(); }
  // Joins (core_.Join); with --defer_eval, writes the run's configuration beside the models.
  absl::Status Join(double timeout_s);
  // Ends the run with an error (or, when a stop signal came meanwhile, with Stop()).
  int Fail(const absl::Status& s);
  // Leaves on a stop signal; the round in progress is dropped, the exchange in flight (if
  // any) is waited for (its await is cancelled). Returns 0.
  int Stop();
  // On a stop signal mid-round r (t: its training so far): lands the exchange in flight, if
  // any (the stop watcher gives it --leave_timeout_s), pushes the steps trained since the last
  // push, counted as what they are (token weighting), then Stop()s. Their update is not
  // awaited; a push that fails is logged and dropped. Without such steps: Stop() at once.
  int Part(uint64_t r, bool continuing, Trained t);
  // The end-of-run table: rounds, tokens, throughput, bytes, validation loss, wall time.
  void LogSummary() const;
  // --state_file: saves the training since the last push (or since the public model it
  // started from) with where it counts from.
  void SaveState();
  // Start, once the model is in: takes up the saved training when it is this run's and can
  // still count (an async run: at most max_staleness versions old; a synchronous one: the
  // open round's, no push in flight), rebased onto the public model. Returns whether it did.
  bool Resume();
  // Steps of the round training now, those trained before a restart (Resume) included.
  uint32_t StepsInRound() const { return carried_steps_ + steps_done_; }
  // Removes the --state_file (its training was pushed, went bad, or the run is over).
  void DropState() {
    if (!o_.state_file.empty()) std::remove(o_.state_file.c_str());
  }

  const WorkerOptions& o_;
  WorkerCore core_;
  const v1::RunConfig& config_;  // core_'s
  Replica& pub_;                 // core_'s
  const std::string& tag_;       // core_'s
  // For the summary (this thread only).
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double train_seconds_ = 0;                // in local training, rounds that were pushed or refused
  // Without overlap: the outer step summed over pushed rounds: computing Δ, checking, encoding,
  // pushing, waiting for the round, decoding, and loading the new model (Python's sync()).
  double outer_seconds_ = 0;
  uint64_t outer_steps_ = 0;
  double first_val_ = -1, last_val_ = -1;   // validation losses (-1: none yet)
  Histogram inner_steps_{DurationBuckets()};  // thread-safe: the metrics endpoint reads it
  // The run (Run), set up by Start. Declared before flight_, so that an exchange still in
  // flight when the session ends (an exception) finishes while these serve it.
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<PeriodicThread> stop_watcher_;  // cancels awaits on a stop signal
  std::optional<Corpus> corpus_;
  std::unique_ptr<Trainer> trainer_;
  bool signmuon_ = false, overlap_ = false;
  uint64_t tokens_per_step_ = 0;
  uint64_t last_eval_ = ~uint64_t{0};  // round of the last evaluation
  Flight flight_;                      // overlap: the last pushed round's exchange, while the next trains
  bool done_ = false;                  // the run is over for this worker
  double wait_s_ = 0;                  // this round's training waited this long for the server
  uint32_t steps_done_ = 0;            // of the round training now
  uint32_t round_steps_ = 0;           // the steps of the round training now (the server's tell, else H)
  uint32_t carried_steps_ = 0;         // of the round training now: steps trained before a restart (Resume)
  bool resumed_ = false;               // the next round trains on from a resumed state
  std::atomic<bool> unpushed_{false};  // a round trains whose steps no push holds (read by the stop watcher)
  bool state_failed_ = false;          // the last save failed (logged once a streak)
  std::chrono::steady_clock::time_point saved_at_ = std::chrono::steady_clock::now();  // SaveState
  int bad_rounds_ = 0;                 // rejected updates in a row (Sound)
  uint32_t injected_faults_ = 0;       // --fault_nonfinite_rounds so far
};




bool WorkerSession::BuildSeededModel(uint64_t checksum) {
  FetchedModel m{0, checksum, InitParams(config_.model(), BuiltinLayout(config_.model()))};
  const uint64_t built = ParamChecksum(m.params.data(), m.params.size());
  if (built != checksum) {
    Logf(tag_.c_str(), "the model built from init_seed %llu has checksum %016llx, the server's is %016llx: fetching it",
         static_cast<unsigned long long>(config_.model().init_seed()), static_cast<unsigned long long>(built),
         static_cast<unsigned long long>(checksum));
    return false;
  }
  pub_.Reset(std::move(m));
  core_.Count([&](WorkerStats& st) { st.round = pub_.round(); });
  Logf(tag_.c_str(), "built model at round %llu (%zu parameters) from init_seed %llu: checksum %016llx is the server's, "
       "nothing fetched", static_cast<unsigned long long>(pub_.round()), pub_.size(),
       static_cast<unsigned long long>(config_.model().init_seed()), static_cast<unsigned long long>(built));
  return true;
}


absl::Status WorkerSession::Join(double timeout_s) {
  if (absl::Status s = core_.Join(timeout_s); !s.ok()) return s;
  if (!o_.defer_eval.empty()) {  // --evaluate=DIR finds the run's configuration here
    if (absl::Status s = WriteFileAtomic(DeferredConfigPath(o_.defer_eval), RunConfigText(config_)); !s.ok()) {
      LogWarn(tag_.c_str(), "--defer_eval: %s", s.ToString().c_str());
    }
  }
  return absl::OkStatus();
}

int WorkerSession::Fail(const absl::Status& s) {
  if (Stopping()) return Stop();
  LogError(tag_.c_str(), "%s", s.ToString().c_str());
  core_.Leave();
  return 1;
}

int WorkerSession::Stop() {
  unpushed_.store(false);  // the watcher cancels the flight's await
  flight_.Drop();
  Logf(tag_.c_str(), "leaving: %s at round %llu", SignalName(o_.stop_signal->load()),
       static_cast<unsigned long long>(pub_.round()));
  if (core_.id() == 0) return 0;  // never joined
  core_.Leave();
  LogSummary();
  return 0;
}

int WorkerSession::Part(uint64_t r, bool continuing, Trained t) {
  if (!unpushed_.load() || StepsInRound() == 0 || o_.leave_timeout_s <= 0) return Stop();
  if (!t.keep.ok() || !*t.keep) return Stop();  // a landing mid-round resynced or ended the run
  if (flight_.active()) {  // the watcher leaves its await alone for --leave_timeout_s
    t.keep = Land();
    if (!t.keep.ok() || !*t.keep) return Stop();
  }
  if (continuing) trainer_->DeltaFrom(pub_.params().data());
  if (!trainer_->delta().AllWithin(kMaxAbsValue)) return Stop();
  round_steps_ = std::min(StepsInRound(), round_steps_);  // the claim: what was trained, up to the tell
  absl::StatusOr<std::pair<std::string, PushedRound>> encoded = Encode(r, t);
  Exchanged x;
  x.status = encoded.status();  // stage kPush: an encoder that failed pushes nothing
  if (encoded.ok()) {
    unpushed_.store(false);  // the watcher cancels the round's await now: the push is what counts
    x = core_.Exchange(encoded->first, encoded->second);
    r = encoded->second.round;
  }
  if (x.stage == Exchanged::kPush && !x.status.ok()) {
    LogWarn(tag_.c_str(), "the %u steps trained since the last push were not pushed (%s)", round_steps_,
            x.status.ToString().c_str());
  } else {
    DropState();  // they are in the push
    Logf(tag_.c_str(), "pushed the %u steps trained since the last push (from round %llu) before leaving",
         round_steps_, static_cast<unsigned long long>(r));
  }
  return Stop();
}

void WorkerSession::LogSummary() const {
  const char* tag = tag_.c_str();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const auto per_s = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  const WorkerStats stats = core_.Stats();
  // "N bytes (Rx smaller than dense fp32, B bits/param)", over the rounds done.
  const auto bytes = [&](uint64_t b) {
    return b == 0 ? absl::StrCat(b, " bytes") : absl::StrCat(b, " bytes (", SizeNote(b, stats.rounds_done, core_.num_params()), ")");
  };
  Logf(tag, "summary: %-10s %llu", "rounds", static_cast<unsigned long long>(stats.rounds_done));
  Logf(tag, "summary: %-10s %llu (%.0f tokens/s while training, %.0f overall)", "tokens",
       static_cast<unsigned long long>(stats.tokens), per_s(stats.tokens, train_seconds_),
       per_s(stats.tokens, wall_s));
  Logf(tag, "summary: %-10s %s", "up", bytes(stats.bytes_up).c_str());
  Logf(tag, "summary: %-10s %s", "down", bytes(stats.bytes_down).c_str());
  Logf(tag, "summary: %-10s %.4f first, %.4f last", "val_loss", first_val_, last_val_);
  Logf(tag, "summary: %-10s %.1f s (%.1f s training, %.1f s waiting for the server)", "wall time", wall_s,
       train_seconds_, core_.wait_seconds());
  if (outer_steps_ > 0) {  // encode, push, wait for the round, apply: what Python's sync() does
    Logf(tag, "summary: %-10s %.2f ms per round over %llu rounds", "outer step", 1e3 * outer_seconds_ / outer_steps_,
         static_cast<unsigned long long>(outer_steps_));
  }
}

int WorkerSession::Run() {
  bool metrics_failed = false;
  metrics_ = StartMetricsOrReport(
      o_.metrics_listen, "worker",
      [this] {
        std::vector<MetricSample> m = WorkerMetrics(core_.Stats());
        m.push_back({"muloco_build_info", "1, labelled with this build's version", false, 1.0,
                     {{"version", MulocoVersion()}}});
        m.push_back(HistogramSample("muloco_worker_inner_step_duration_seconds",
                                    "Seconds per inner optimizer step (forward, backward, update)",
                                    inner_steps_.Snapshot()));
        return m;
      },
      &metrics_failed);
  if (metrics_failed) return 2;
  // Cancels a round's long poll on a stop signal (checks elsewhere are between steps; polled:
  // a signal handler can only set a flag): at once, or, while trained steps wait for their
  // push (Part), once the exchange in flight has had --leave_timeout_s to land.
  if (o_.stop_signal != nullptr) {
    stop_watcher_ = std::make_unique<PeriodicThread>(0.05, [this, since = std::chrono::steady_clock::time_point{}]() mutable {
      if (o_.stop_signal->load() == 0) return true;
      const auto now = std::chrono::steady_clock::now();
      if (since == std::chrono::steady_clock::time_point{}) since = now;
      if (unpushed_.load() && Seconds(now - since) < o_.leave_timeout_s) return true;
      core_.transport().CancelAwaits();
      return false;
    });
  }
  if (std::optional<int> code = Start()) return *code;  // could not start (or stopped): the exit code
  while (!done_) {
    if (Stopping()) return Stop();
    const bool continuing = flight_.active() || resumed_;
    const uint64_t r = flight_.active() ? flight_.pushed().round + 1 : pub_.round();
    if (!flight_.active()) {
      if (r >= config_.total_rounds()) break;  // resynced after the run ended: the final model is ours
      MaybeEvaluate();
    }
    Trained t = Train(r, continuing);
    resumed_ = false;
    if (Stopping()) return Part(r, continuing, t);
    if (t.keep.ok() && *t.keep && flight_.active()) t.keep = Land();
    if (!t.keep.ok()) return Fail(t.keep.status());
    if (!*t.keep || done_ || r >= config_.total_rounds()) continue;
    train_seconds_ += t.seconds;
    const auto outer_start = std::chrono::steady_clock::now();
    if (continuing) trainer_->DeltaFrom(pub_.params().data());  // rebased: Δ = θ_pub − θ_end
    absl::StatusOr<bool> sound = Sound(r);
    if (!sound.ok()) return Fail(sound.status());
    if (!*sound) continue;
    if (absl::Status s = Push(r, t); !s.ok()) return Fail(s);
    if (!overlap_) {
      outer_seconds_ += Seconds(std::chrono::steady_clock::now() - outer_start) + t.copy_seconds;
      ++outer_steps_;
    }
  }
  return Finish();
}

std::optional<int> WorkerSession::Start() {
  if (absl::Status s = Join(o_.connect_timeout_s); !s.ok()) {
    if (Stopping()) return Stop();
    LogError(tag_.c_str(), "cannot join %s: %s", core_.transport().Describe().c_str(), s.ToString().c_str());
    return 1;
  }
  // At once, so that round 0 is as unlikely as can be to close before this worker trains it.
  const bool built = o_.init_from_seed && core_.joined_round() == 0 && BuildSeededModel(core_.joined_checksum());
  absl::StatusOr<Corpus> corpus =
      LoadCorpus(o_.data, o_.val_data, config_.model().vocab_size(), config_.model().context(),
                 config_.model().tokenizer_checksum());
  if (!corpus.ok()) return Fail(absl::InvalidArgumentError(absl::StrCat("data: ", corpus.status().message())));
  corpus_.emplace(*std::move(corpus));
  Logf(tag_.c_str(), "data %s; device %s", corpus_->description.c_str(), o_.device.Name().c_str());
  trainer_ = NewTrainer();
  signmuon_ = KindsOf(config_).mode == RunMode::kSignMuon;
  // An asynchronous run never waits: the exchange always flies beside the next round's training.
  overlap_ = (o_.overlap || KindsOf(config_).async) && !signmuon_;
  if (o_.overlap && signmuon_) {
    LogWarn(tag_.c_str(), "--overlap: SignMuon takes one step per round, nothing to overlap; running without it");
  }
  if (absl::Status s = core_.Begin(); !s.ok()) return Fail(s);
  if (!built) {
    if (absl::Status s = core_.Resync(); !s.ok()) return Fail(s);
  }
  tokens_per_step_ = uint64_t{config_.batch_size()} * config_.model().context();
  resumed_ = Resume();
  return std::nullopt;
}

void WorkerSession::SaveState() {
  saved_at_ = std::chrono::steady_clock::now();
  LocalState s;
  s.run = RunChecksum(config_);
  s.in_flight = flight_.active();  // the replica is the flight's to change meanwhile: the base is the pushed θ
  s.base_round = s.in_flight ? flight_.pushed().round : pub_.round();
  s.steps = StepsInRound();
  s.trainer = trainer_->SaveState(s.in_flight ? nullptr : pub_.params().data());
  absl::Status st = WriteLocalState(o_.state_file, s);
  if (!st.ok() && !state_failed_) {
    LogWarn(tag_.c_str(), "--state_file: %s (not repeated while saves keep failing)", st.ToString().c_str());
  }
  state_failed_ = !st.ok();
}

bool WorkerSession::Resume() {
  if (o_.state_file.empty()) return false;
  if (signmuon_) {
    LogWarn(tag_.c_str(), "--state_file: SignMuon trains one step a round, nothing to save or resume");
    return false;
  }
  absl::StatusOr<LocalState> s = ReadLocalState(o_.state_file);
  if (!s.ok()) {
    if (!absl::IsNotFound(s.status())) LogWarn(tag_.c_str(), "--state_file: %s; starting afresh", s.status().ToString().c_str());
    return false;
  }
  const uint64_t now = pub_.round(), staleness = core_.max_staleness();
  std::string why;
  if (s->run != RunChecksum(config_)) {
    why = "it was saved in a run of another configuration";
  } else if (s->base_round > now) {
    why = absl::StrCat("it counts from round ", s->base_round, ", after the server's ", now, " (a restarted run)");
  } else if (!KindsOf(config_).async && (s->base_round != now || s->in_flight)) {
    why = absl::StrCat("a synchronous run resumes only the open round's training (it counts from round ",
                       s->base_round, "; round ", now, " is open)");
  } else if (KindsOf(config_).async && now - s->base_round > staleness) {
    why = absl::StrCat("it counts from round ", s->base_round, ", more than the run's max_staleness (", staleness,
                       ") behind round ", now);
  }
  if (why.empty()) {
    if (absl::Status st = trainer_->RestoreState(s->trainer); !st.ok()) {
      why = std::string(st.message());
      trainer_ = NewTrainer();  // possibly half restored
    }
  }
  if (!why.empty()) {
    LogWarn(tag_.c_str(), "--state_file %s not resumed: %s; starting afresh", o_.state_file.c_str(), why.c_str());
    return false;
  }
  trainer_->Rebase(pub_.params().data());
  carried_steps_ = s->steps;
  Logf(tag_.c_str(), "resumed %u steps of local training from %s (counted from round %llu's model; rebased onto round %llu's)",
       s->steps, o_.state_file.c_str(), static_cast<unsigned long long>(s->base_round),
       static_cast<unsigned long long>(now));
  return true;
}

void WorkerSession::MaybeEvaluate(bool final) {
  if (Stopping()) return;  // leaving: no time for it
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
  core_.Count([&](WorkerStats& st) { st.val_loss = last_val_; });
  if (first_val_ < 0) first_val_ = last_val_;
  Logf(tag_.c_str(), "eval: round %llu val_loss %.4f", static_cast<unsigned long long>(r), last_val_);
}

bool WorkerSession::Finished(const Exchanged& x) {
  if (x.result.done) return true;
  const uint64_t rounds = core_.Stats().rounds_done;
  if (!o_.leave_after || rounds < o_.leave_after) return false;
  Logf(tag_.c_str(), "leaving after %llu rounds (--leave_after)", static_cast<unsigned long long>(rounds));
  return true;
}

absl::StatusOr<bool> WorkerSession::Land() {
  const Exchanged x = flight_.Land(&wait_s_);
  absl::StatusOr<bool> applied = core_.Settle(x, flight_.pushed(), wait_s_);
  if (!applied.ok()) return applied;
  // A push that never got in (refused: too stale, or the server forgot this worker) holds
  // training that no round merged: it carries on too.
  if (!*applied) return KeepAfterResync(x.stage == Exchanged::kPush && x.status.code() != absl::StatusCode::kInvalidArgument);
  if (Finished(x)) {
    done_ = true;
    return false;
  }
  trainer_->Rebase(pub_.params().data());
  Logf(tag_.c_str(), "round %llu: rebased onto round %llu's model after %u of %u steps",
       static_cast<unsigned long long>(flight_.pushed().round + 1), static_cast<unsigned long long>(pub_.round()),
       steps_done_, round_steps_);
  MaybeEvaluate();
  return true;
}

bool WorkerSession::KeepAfterResync(bool push_refused) {
  if (!KindsOf(config_).async || pub_.round() >= config_.total_rounds()) return false;
  const uint32_t refused = push_refused ? flight_.pushed().steps + flight_.pushed().extra : 0;
  if (refused > 0) {
    trainer_->UnmarkPush();
    carried_steps_ += refused;
  }
  trainer_->Rebase(pub_.params().data());
  Logf(tag_.c_str(), "round %llu: the %u steps trained since the lost push%s carry on from round %llu's model",
       static_cast<unsigned long long>(flight_.pushed().round + 1), steps_done_,
       refused ? absl::StrFormat(" and its own %u", refused).c_str() : "", static_cast<unsigned long long>(pub_.round()));
  return true;
}

WorkerSession::Trained WorkerSession::Train(uint64_t r, bool continuing) {
  Trained t;
  wait_s_ = 0;
  steps_done_ = 0;
  if (r >= config_.total_rounds()) return t;
  round_steps_ = signmuon_ ? 1 : core_.InnerSteps();  // at the start; fewer when told so mid-round
  unpushed_.store(!signmuon_);  // a stop signal from here on ends in Part
  const auto train_start = std::chrono::steady_clock::now();
  RoundProgress progress(tag_, o_.progress_s, r, round_steps_, tokens_per_step_);
  auto step_start = train_start;
  double busy_s = 0;  // stepping (and --slowdown's naps), not landing a flight
  // Async: rather than wait for the last push's round to close, train on (at most as many
  // steps again; the steps past the tell are not claimed).
  const bool train_on = continuing && KindsOf(config_).async;
  auto after_step = [&](uint32_t steps) {
    const auto now = std::chrono::steady_clock::now();
    inner_steps_.Observe(Seconds(now - step_start));
    if (o_.slowdown > 1 && !core_.Nap((o_.slowdown - 1) * Seconds(now - step_start))) return false;
    busy_s += Seconds(std::chrono::steady_clock::now() - step_start);
    // Reported with the next heartbeat, before any push counts: a worker too slow for any
    // push to count is still told fewer steps (--adaptive_h).
    core_.Count([&](WorkerStats& st) { st.inner_step_seconds = busy_s / steps; });
    steps_done_ = steps;
    progress.AfterStep(steps);
    if (flight_.Due(steps, o_.overlap_steps)) {
      t.keep = Land();  // the update arrived mid-round: rebase now
      if (!t.keep.ok() || !*t.keep) return false;
    }
    if (!o_.state_file.empty() && Seconds(std::chrono::steady_clock::now() - saved_at_) >= o_.state_every_s) SaveState();
    step_start = std::chrono::steady_clock::now();  // a landing (or a save) is not a step's time
    const uint32_t total = StepsInRound();
    if (total < round_steps_ && total >= core_.InnerSteps()) {  // told fewer steps mid-round: push what is done
      round_steps_ = total;
      return false;
    }
    if (total >= round_steps_ && !(train_on && flight_.active())) return false;
    return !Stopping();
  };
  if (signmuon_) {
    t.loss = trainer_->SignDirection(pub_.params().data());
    inner_steps_.Observe(Seconds(std::chrono::steady_clock::now() - train_start));
  } else if (continuing) {
    // A resumed round goes on where its schedule was (carried_steps_ is 0 otherwise).
    t.loss = trainer_->TrainSteps(r * config_.inner_steps() + carried_steps_, train_on ? 2 * round_steps_ : round_steps_,
                                  after_step);
  } else {  // θ_pub in, H steps, Δ out: the copies are timed as part of the outer step
    trainer_->SetParams(pub_.params().data());
    t.copy_seconds = Seconds(std::chrono::steady_clock::now() - train_start);
    t.loss = trainer_->TrainSteps(r * config_.inner_steps(), round_steps_, after_step);
    const auto delta_start = std::chrono::steady_clock::now();
    trainer_->DeltaFrom(pub_.params().data());
    t.copy_seconds += Seconds(std::chrono::steady_clock::now() - delta_start);
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
  carried_steps_ = 0;
  DropState();
  core_.uplink().Reset();
  if (absl::Status s = core_.Resync(); !s.ok()) return s;
  return false;
}

absl::StatusOr<std::pair<std::string, PushedRound>> WorkerSession::Encode(uint64_t r, const Trained& t) {
  // The version the update starts from: round r, but in an asynchronous run, where rounds
  // close without this worker, the replica's (a rebase moved the training onto it).
  if (KindsOf(config_).async) r = pub_.round();
  absl::StatusOr<std::string> payload = core_.uplink().Encode(trainer_->delta().data(), r);
  if (!payload.ok()) return payload.status();  // the device failed mid-run
  const PushedRound pushed{r,
                           payload->size(),
                           t.loss,
                           t.seconds,
                           round_steps_,
                           round_steps_ * tokens_per_step_,
                           StepsInRound() > round_steps_ ? StepsInRound() - round_steps_ : 0};
  return std::make_pair(*std::move(payload), pushed);
}

absl::Status WorkerSession::Push(uint64_t r, const Trained& t) {
  absl::StatusOr<std::pair<std::string, PushedRound>> encoded = Encode(r, t);
  if (!encoded.ok()) return encoded.status();
  auto& [payload, pushed] = *encoded;
  carried_steps_ = 0;
  unpushed_.store(false);
  DropState();  // its steps are in this push: resuming them would count them twice
  if (overlap_) {  // train the next round while this one is pushed, aggregated and sent back
    trainer_->MarkPush();
    flight_.Launch(&core_, pushed, std::move(payload));
    return absl::OkStatus();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Exchanged x = core_.Exchange(payload, pushed);
  if (Stopping()) return absl::CancelledError("stop signal");  // Fail leaves through Stop
  absl::StatusOr<bool> applied = core_.Settle(x, pushed, Seconds(std::chrono::steady_clock::now() - t0));
  if (!applied.ok()) return applied.status();
  done_ = *applied && Finished(x);
  return absl::OkStatus();
}

int WorkerSession::Finish() {
  MaybeEvaluate(/*final=*/true);
  core_.Leave();
  DropState();  // the run is over: nothing to resume
  if (!o_.save_final.empty()) {
    if (absl::Status s = WriteFloatsAtomic(o_.save_final, pub_.params()); !s.ok()) return Fail(s);
  }
  const WorkerStats stats = core_.Stats();
  Logf(tag_.c_str(),
       "final: val_loss %.4f (start %.4f) after %llu rounds; up %llu bytes, down %llu bytes; checksum %016llx",
       last_val_, first_val_, static_cast<unsigned long long>(stats.rounds_done),
       static_cast<unsigned long long>(stats.bytes_up), static_cast<unsigned long long>(stats.bytes_down),
       static_cast<unsigned long long>(pub_.checksum()));
  LogSummary();
  return 0;
}



int RunWorker(const WorkerOptions& o) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = MakeChannelCredentials(o.tls);
  if (!creds.ok()) {
    std::fprintf(stderr, "muloco-worker: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  std::string token;
  if (!o.token_file.empty()) {
    absl::StatusOr<std::string> read = ReadJoinToken(o.token_file);
    if (!read.ok()) {
      std::fprintf(stderr, "muloco-worker: --%s\n", std::string(read.status().message()).c_str());
      return 2;
    }
    token = *std::move(read);
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
