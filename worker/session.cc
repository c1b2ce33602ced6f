// RunWorker / RunBaseline (see session.h). Status policy: UNAVAILABLE, RESOURCE_EXHAUSTED,
// CANCELLED and DEADLINE_EXCEEDED (calls cut by a server restart) retry with backoff;
// FAILED_PRECONDITION, a refused push (INVALID_ARGUMENT), a checksum mismatch or a model
// gone non-finite resync by fetching the model; NOT_FOUND (evicted) joins again;
// ALREADY_EXISTS on a push means an earlier attempt got through. Anything else (a refused
// token or session, a bad config) ends the worker with the error. A stop signal
// (WorkerOptions::stop_signal) is checked between inner steps, between retries and while
// awaiting a round; the worker then leaves without pushing the round in progress.
#include "worker/session.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/file_io.h"
#include "common/histogram.h"
#include "common/codec.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "common/version.h"
#include "common/worker_stats.h"
#include "worker/client.h"
#include "worker/data.h"
#include "worker/trainer.h"

namespace muloco {
namespace {

// Writes p (raw fp32) to path atomically; nothing when path is empty.
absl::Status SaveParams(const std::string& path, const std::vector<float>& p) {
  if (path.empty()) return absl::OkStatus();
  return WriteFileAtomic(path, absl::string_view(reinterpret_cast<const char*>(p.data()), p.size() * sizeof(float)));
}

absl::StatusOr<Corpus> LoadData(const WorkerOptions& o, const v1::RunConfig& c) {
  return LoadCorpus(o.data.empty() ? kDefaultCorpus : o.data, o.val_data, c.model().vocab_size(), c.model().context());
}

// Sends heartbeats for *id every period_s until destroyed (the id changes on a rejoin),
// each with the worker's counters from `report`.
class HeartbeatThread {
 public:
  HeartbeatThread(ServerClient* client, const std::atomic<uint64_t>* id, double period_s,
                  std::function<v1::WorkerReport()> report)
      : thread_([=] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, std::chrono::duration<double>(period_s), [&] { return stop_; })) {
            lock.unlock();
            client->Heartbeat(id->load(), report()).IgnoreError();  // a failure shows up on the next real call
            lock.lock();
          }
        }) {}
  ~HeartbeatThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) { return s.status(); }

// What a transient failure means, for the retry log line; nullptr: not transient.
const char* TransientReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
      return "server unavailable";  // down, restarting, link cut
    case absl::StatusCode::kResourceExhausted:
      return "server busy";  // a server limit, e.g. joins per minute
    case absl::StatusCode::kCancelled:
      return "call cancelled";  // a server shutting down cancels the calls in flight
    case absl::StatusCode::kDeadlineExceeded:
      return "call timed out";
    default:
      return nullptr;
  }
}

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

// Runs on_stop once, on its own thread, when *signal turns nonzero (polled: a signal handler
// can only set a flag), so that a call blocked elsewhere can be cancelled. Null: does nothing.
class StopWatcher {
 public:
  StopWatcher(const std::atomic<int>* signal, std::function<void()> on_stop) {
    if (signal == nullptr) return;
    thread_ = std::thread([this, signal, on_stop = std::move(on_stop)] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return done_; })) {
        if (signal->load() != 0) {
          lock.unlock();
          on_stop();
          return;
        }
      }
    });
  }
  ~StopWatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

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
  static double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

  const std::string& tag_;
  const double period_s_;
  const uint64_t round_;
  const uint32_t steps_;
  const uint64_t tokens_per_step_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double next_s_ = period_s_;  // seconds after start_ of the next line
};

// Every value finite and within what a payload may carry.
bool UsableUpdate(const std::vector<float>& v) {
  for (float x : v)
    if (!(std::fabs(x) <= kMaxAbsValue)) return false;
  return true;
}

ClientOptions ClientOptionsFor(const WorkerOptions& o) {
  ClientOptions c;
  c.tls_server_name = o.tls_server_name;
  c.stall_timeout_s = o.stall_timeout_s;
  c.chunk_bytes = o.chunk_bytes;
  return c;
}

}  // namespace

// One worker's connection state: id, configuration, public model; rejoin and resync live here.
class WorkerSession {
 public:
  WorkerSession(const WorkerOptions& o, std::shared_ptr<grpc::ChannelCredentials> creds, std::string token)
      : o_(o), client_(o.server, std::move(creds), ClientOptionsFor(o)), token_(std::move(token)) {
    name_ = o.name.empty() ? absl::StrCat("worker-", getpid()) : o.name;
    tag_ = absl::StrCat("worker ", SafeName(name_));
  }

  int Run();

 private:
  absl::Status Join(double timeout_s);
  absl::Status Resync();
  // Ends the run with an error (or, when a stop signal came meanwhile, with Stop()).
  int Fail(const absl::Status& s);
  // Leaves on a stop signal; the round in progress is dropped. Returns 0.
  int Stop();
  bool Stopping() const { return o_.stop_signal != nullptr && o_.stop_signal->load() != 0; }
  // Sleeps s seconds, or less when a stop signal comes. Returns !Stopping().
  bool Nap(double s);
  // Calls fn until it returns anything but a transient code (TransientReason), backing off
  // exponentially from 0.1 s to 5 s with +-50% jitter, for at most timeout_s, and never
  // after a stop signal (then the last result is returned).
  template <typename F>
  auto Retry(F fn, double timeout_s) -> decltype(fn());
  // The end-of-run table: rounds, tokens, throughput, bytes, validation loss, wall time.
  void LogSummary() const;
  // Changes the counters that /metrics reports (only this thread writes them).
  template <typename F>
  void Count(F change) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    change(stats_);
  }

  const WorkerOptions& o_;
  ServerClient client_;
  const std::string token_;
  std::string name_, tag_;  // tag_: "worker NAME", prefixes every log line
  std::atomic<uint64_t> id_{0};
  uint64_t join_index_ = 0;  // of the first join: seeds this worker's data order
  v1::RunConfig config_;
  FetchedModel pub_;
  std::mutex stats_mu_;
  WorkerStats stats_;  // guarded by stats_mu_ for the metrics endpoint's reads
  // For the summary (this thread only).
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double train_seconds_ = 0;                // in local training, rounds that were pushed or refused
  double first_val_ = -1, last_val_ = -1;   // validation losses (-1: none yet)
  uint64_t n_ = 0;                          // parameters of the model (for size notes)
  Histogram inner_steps_{DurationBuckets()};  // thread-safe: the metrics endpoint reads it
};

template <typename F>
auto WorkerSession::Retry(F fn, double timeout_s) -> decltype(fn()) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  const auto start = std::chrono::steady_clock::now();
  double backoff = 0.1;
  for (absl::StatusCode logged = absl::StatusCode::kOk;;) {
    auto result = fn();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const absl::StatusCode code = StatusOf(result).code();
    const char* reason = TransientReason(code);
    if (reason == nullptr || waited > timeout_s || Stopping()) return result;
    if (code != logged) {
      LogWarn(tag_.c_str(), "%s (%s); retrying", reason, std::string(StatusOf(result).message()).c_str());
    }
    logged = code;
    if (!Nap(backoff * std::uniform_real_distribution<>(0.5, 1.5)(rng))) return result;
    backoff = std::min(5.0, backoff * 2);
  }
}

bool WorkerSession::Nap(double s) {
  constexpr double kSlice = 0.05;  // how soon a stop signal is noticed
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  while (!Stopping()) {
    const double left = std::chrono::duration<double>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return true;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, kSlice)));
  }
  return false;
}

absl::Status WorkerSession::Join(double timeout_s) {
  absl::StatusOr<v1::JoinResponse> joined = Retry([&] { return client_.Join(name_, token_); }, timeout_s);
  if (!joined.ok()) return joined.status();
  if (id_ != 0 && joined->config().SerializeAsString() != config_.SerializeAsString()) {
    return absl::FailedPreconditionError("the server now runs a different configuration");
  }
  if (absl::Status s = ValidateRunConfig(joined->config()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("server sent a bad config: ", s.message()));
  }
  if (joined->num_params() != TotalParams(GptLayout(joined->config().model()))) {
    return absl::InvalidArgumentError("server's parameter count does not match its config");
  }
  if (id_ == 0) join_index_ = joined->join_index();
  config_ = joined->config();
  id_ = joined->worker_id();
  client_.SetSession(id_, joined->session_key());
  Logf(tag_.c_str(), "joined %s as %s (id %llu) at round %llu: %s", o_.server.c_str(), name_.c_str(),
       static_cast<unsigned long long>(id_.load()), static_cast<unsigned long long>(joined->round()),
       DescribeRunConfig(config_).c_str());
  return absl::OkStatus();
}

// Fetches the public model; joins again first if the server no longer knows this worker.
absl::Status WorkerSession::Resync() {
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<FetchedModel> m =
        Retry([&] { return client_.FetchModel(id_.load()); }, o_.retry_timeout_s);
    if (m.ok()) {
      pub_ = *std::move(m);
      Count([&](WorkerStats& st) {
        ++st.model_fetches;
        st.round = pub_.round;
      });
      Logf(tag_.c_str(), "fetched model at round %llu (%zu parameters)", static_cast<unsigned long long>(pub_.round),
           pub_.params.size());
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
  client_.Leave(id_.load()).IgnoreError();
  return 1;
}

int WorkerSession::Stop() {
  Logf(tag_.c_str(), "leaving: %s at round %llu", SignalName(o_.stop_signal->load()),
       static_cast<unsigned long long>(pub_.round));
  if (id_ == 0) return 0;  // never joined
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
  // "N bytes (Rx smaller than dense fp32, B bits/param)", over the rounds done.
  const auto bytes = [&](uint64_t b) {
    return b == 0 ? absl::StrCat(b, " bytes") : absl::StrCat(b, " bytes (", SizeNote(b, stats_.rounds_done, n_), ")");
  };
  Logf(tag, "summary: %-10s %llu", "rounds", static_cast<unsigned long long>(stats_.rounds_done));
  Logf(tag, "summary: %-10s %llu (%.0f tokens/s while training, %.0f overall)", "tokens",
       static_cast<unsigned long long>(stats_.tokens), per_s(stats_.tokens, train_seconds_),
       per_s(stats_.tokens, wall_s));
  Logf(tag, "summary: %-10s %s", "up", bytes(stats_.bytes_up).c_str());
  Logf(tag, "summary: %-10s %s", "down", bytes(stats_.bytes_down).c_str());
  Logf(tag, "summary: %-10s %.4f first, %.4f last", "val_loss", first_val_, last_val_);
  Logf(tag, "summary: %-10s %.1f s (%.1f s training)", "wall time", wall_s, train_seconds_);
}

int WorkerSession::Run() {
  bool metrics_failed = false;
  std::unique_ptr<MetricsEndpoint> metrics = StartMetricsOrReport(
      o_.metrics_listen, "worker",
      [this] {
        std::lock_guard<std::mutex> lock(stats_mu_);
        std::vector<MetricSample> m = WorkerMetrics(stats_);
        m.push_back({"muloco_build_info", "1, labelled with this build's version", false, 1.0,
                     {{"version", MulocoVersion()}}});
        m.push_back(HistogramSample("muloco_worker_inner_step_duration_seconds",
                                    "Seconds per inner optimizer step (forward, backward, update)",
                                    inner_steps_.Snapshot()));
        return m;
      },
      &metrics_failed);
  if (metrics_failed) return 2;
  // Cancels a round's long poll at once on a stop signal (checks elsewhere are between steps).
  StopWatcher stop_watcher(o_.stop_signal, [this] { client_.CancelAwaits(); });
  if (absl::Status s = Join(o_.connect_timeout_s); !s.ok()) {
    if (Stopping()) return Stop();
    LogError(tag_.c_str(), "cannot join %s: %s", o_.server.c_str(), s.ToString().c_str());
    return 1;
  }
  absl::StatusOr<Corpus> corpus = LoadData(o_, config_);
  if (!corpus.ok()) return Fail(absl::InvalidArgumentError(absl::StrCat("data: ", corpus.status().message())));
  Logf(tag_.c_str(), "data %s", corpus->description.c_str());
  auto trainer = std::make_unique<Trainer>(config_, &*corpus, config_.data_seed() + join_index_);
  const ParamLayout layout = GptLayout(config_.model());
  const size_t n = TotalParams(layout);
  const std::vector<Segment> uplink = PlanSegments(CodecShapes(layout), *ParseCodec(config_.uplink_codec()));
  const bool signmuon = KindsOf(config_).mode == RunMode::kSignMuon;
  auto heartbeat = std::make_unique<HeartbeatThread>(&client_, &id_, o_.heartbeat_s, [this] {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return ToReport(stats_);
  });
  if (absl::Status s = Resync(); !s.ok()) return Fail(s);

  n_ = n;
  std::vector<float> delta(n), ef(n, 0.0f);  // error feedback persists across rounds
  const uint64_t tokens_per_step = uint64_t{config_.batch_size()} * config_.model().context();
  const uint64_t tokens_per_round = (signmuon ? 1 : config_.inner_steps()) * tokens_per_step;
  auto evaluate = [&](uint64_t round) {
    last_val_ = trainer->Evaluate(pub_.params.data());
    Count([&](WorkerStats& st) { st.val_loss = last_val_; });
    if (first_val_ < 0) first_val_ = last_val_;
    Logf(tag_.c_str(), "eval: round %llu val_loss %.4f", static_cast<unsigned long long>(round), last_val_);
  };
  // NOT_FOUND (this server does not know us: evicted, or restarted) and FAILED_PRECONDITION
  // (stale round) both end in a resync; anything else but the transient codes (retried) is fatal.
  auto recoverable = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kNotFound || s.code() == absl::StatusCode::kFailedPrecondition;
  };
  uint64_t last_eval = ~uint64_t{0};
  constexpr int kMaxBadRounds = 3;
  int bad_rounds = 0;  // in a row
  uint32_t injected_faults = 0;
  for (;;) {
    if (Stopping()) return Stop();
    const uint64_t r = pub_.round;
    if (r >= config_.total_rounds()) break;  // resynced after the run ended: the final model is ours
    if (config_.eval_every() && r % config_.eval_every() == 0 && r != last_eval) {
      evaluate(r);
      last_eval = r;
    }
    std::vector<float> ef_next;  // ef after this push; adopted only once the push is accepted
    double train_loss = 0;
    std::string payload;
    auto went_bad = [&] {  // never push a non-finite update: start over from the server's model
      LogWarn(tag_.c_str(),
              "round %llu: the update is non-finite or out of range; resetting the optimizer and resyncing",
              static_cast<unsigned long long>(r));
      if (++bad_rounds >= kMaxBadRounds) {
        return absl::InternalError(absl::StrCat("training gave non-finite or out-of-range updates ", bad_rounds,
                                                " rounds in a row from the server's model: lower the learning rate"));
      }
      trainer = std::make_unique<Trainer>(config_, &*corpus, config_.data_seed() + join_index_);
      std::fill(ef.begin(), ef.end(), 0.0f);
      return Resync();
    };
    // SignMuon's vote needs only each coordinate's sign: no error feedback.
    const auto train_start = std::chrono::steady_clock::now();
    RoundProgress progress(tag_, o_.progress_s, r, config_.inner_steps(), tokens_per_step);
    auto step_start = train_start;
    train_loss = signmuon ? trainer->SignDirection(pub_.params.data(), delta.data())
                          : trainer->TrainRound(pub_.params.data(), r * config_.inner_steps(), delta.data(),
                                                [&](uint32_t done) {
                                                  const auto now = std::chrono::steady_clock::now();
                                                  inner_steps_.Observe(std::chrono::duration<double>(now - step_start).count());
                                                  step_start = now;
                                                  progress.AfterStep(done);
                                                  return !Stopping();
                                                });
    const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
    if (signmuon) inner_steps_.Observe(train_s);
    if (Stopping()) return Stop();  // never push a partial round
    train_seconds_ += train_s;
    if (injected_faults < o_.fault_nonfinite_rounds) {
      ++injected_faults;
      delta[0] = std::numeric_limits<float>::quiet_NaN();
    }
    if (!UsableUpdate(delta)) {
      if (absl::Status s = went_bad(); !s.ok()) return Fail(s);
      continue;
    }
    bad_rounds = 0;
    if (signmuon) {
      // Zero directions (e.g. embedding rows of bytes absent from the batch) get coins seeded
      // by this worker and round, so that workers do not all vote the same way for them.
      const uint64_t tie_seed = (config_.data_seed() + join_index_ + 1) * 0x9E3779B97F4A7C15ULL ^ r * 0xC2B2AE3D27D4EB4FULL;
      payload = Compress(uplink, nullptr, 1.0f, delta.data(), tie_seed);
    } else {  // compress into a copy of ef, so a refused push loses nothing
      ef_next = ef;
      payload = Compress(uplink, delta.data(), config_.ef_beta(), ef_next.data());
    }
    absl::Status pushed = Retry([&] { return client_.Push(id_.load(), r, payload, static_cast<float>(train_loss)); },
                                o_.retry_timeout_s);
    if (Stopping()) return Stop();
    // An earlier attempt of this push got through (its reply was lost): the server has it.
    if (pushed.code() == absl::StatusCode::kAlreadyExists) pushed = absl::OkStatus();
    if (recoverable(pushed) || pushed.code() == absl::StatusCode::kInvalidArgument) {
      LogWarn(tag_.c_str(), "push for round %llu refused (%s); resyncing", static_cast<unsigned long long>(r),
              std::string(pushed.message()).c_str());
      if (absl::Status s = Resync(); !s.ok()) return Fail(s);
      continue;
    }
    if (!pushed.ok()) return Fail(pushed);
    double ef_norm = 0;
    if (!signmuon) {
      ef.swap(ef_next);
      for (float v : ef) ef_norm += static_cast<double>(v) * v;
      ef_norm = std::sqrt(ef_norm);
    }
    absl::StatusOr<RoundResult> result =
        Retry([&] { return client_.AwaitRound(id_.load(), r); }, o_.retry_timeout_s);
    if (Stopping()) return Stop();
    if (recoverable(result.status())) {
      LogWarn(tag_.c_str(), "round %llu: %s; resyncing", static_cast<unsigned long long>(r),
              std::string(result.status().message()).c_str());
      if (absl::Status s = Resync(); !s.ok()) return Fail(s);
      continue;
    }
    if (!result.ok()) return Fail(result.status());
    absl::Status applied = DecodeAccumulate(result->payload, n, pub_.params.data());
    if (!applied.ok() || ParamChecksum(pub_.params.data(), n) != result->checksum) {
      LogWarn(tag_.c_str(), "round %llu: update %s; fetching the model", static_cast<unsigned long long>(r),
              applied.ok() ? "checksum mismatch" : applied.ToString().c_str());
      if (absl::Status s = Resync(); !s.ok()) return Fail(s);
    } else {
      pub_.round = result->next_round;
      pub_.checksum = result->checksum;
    }
    Count([&](WorkerStats& st) {
      ++st.rounds_done;
      st.round = pub_.round;
      st.bytes_up += payload.size();
      st.bytes_down += result->payload.size();
      st.tokens += tokens_per_round;
      st.train_loss = train_loss;
      st.ef_residual_norm = ef_norm;
      st.inner_step_seconds = train_s / (signmuon ? 1 : config_.inner_steps());
      st.tokens_per_second = train_s > 0 ? tokens_per_round / train_s : 0;
    });
    Logf(tag_.c_str(),
         "round %llu: train_loss %.4f, up %zu bytes (%s), down %zu bytes (%s), %u contributors, checksum %016llx ok",
         static_cast<unsigned long long>(r), train_loss, payload.size(), SizeNote(payload.size(), 1, n).c_str(),
         result->payload.size(), SizeNote(result->payload.size(), 1, n).c_str(), result->contributors,
         static_cast<unsigned long long>(pub_.checksum));
    if (result->done) break;
    if (o_.leave_after && stats_.rounds_done >= o_.leave_after) {
      Logf(tag_.c_str(), "leaving after %llu rounds (--leave_after)",
           static_cast<unsigned long long>(stats_.rounds_done));
      break;
    }
  }
  evaluate(pub_.round);
  heartbeat.reset();
  client_.Leave(id_.load()).IgnoreError();
  if (absl::Status s = SaveParams(o_.save_final, pub_.params); !s.ok()) return Fail(s);
  Logf(tag_.c_str(),
       "final: val_loss %.4f (start %.4f) after %llu rounds; up %llu bytes, down %llu bytes; checksum %016llx",
       last_val_, first_val_, static_cast<unsigned long long>(stats_.rounds_done),
       static_cast<unsigned long long>(stats_.bytes_up), static_cast<unsigned long long>(stats_.bytes_down),
       static_cast<unsigned long long>(pub_.checksum));
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
    absl::StatusOr<std::string> text = ReadFile(o.token_file);
    if (text.ok()) token = std::string(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
    if (token.empty()) {
      std::fprintf(stderr, "muloco-worker: --token_file=%s: cannot read a token there\n", o.token_file.c_str());
      return 2;
    }
  }
  return WorkerSession(o, *std::move(creds), std::move(token)).Run();
}

int RunBaseline(const v1::RunConfig& config, const WorkerOptions& o) {
  absl::StatusOr<Corpus> corpus = LoadData(o, config);
  if (!corpus.ok()) {
    std::fprintf(stderr, "muloco-worker: data: %s\n", corpus.status().ToString().c_str());
    return 1;
  }
  Logf("baseline", "%s; data %s", DescribeRunConfig(config).c_str(), corpus->description.c_str());
  Trainer trainer(config, &*corpus, config.data_seed());
  std::vector<float> params = InitParams(config.model(), GptLayout(config.model()));
  trainer.SetParams(params.data());
  double first_val = -1, last_val = -1;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t r = 0; r <= config.total_rounds(); ++r) {
    if (r == config.total_rounds() || (config.eval_every() && r % config.eval_every() == 0)) {
      trainer.GetParams(params.data());
      last_val = trainer.Evaluate(params.data());
      if (first_val < 0) first_val = last_val;
      Logf("baseline", "eval: round %llu val_loss %.4f", static_cast<unsigned long long>(r), last_val);
    }
    if (r == config.total_rounds()) break;
    double loss = 0;
    for (uint32_t h = 0; h < config.inner_steps(); ++h) loss += trainer.InnerStep(r * config.inner_steps() + h);
    Logf("baseline", "round %llu: train_loss %.4f", static_cast<unsigned long long>(r), loss / config.inner_steps());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double tokens = static_cast<double>(config.total_rounds()) * config.inner_steps() * config.batch_size() *
                        config.model().context();
  trainer.GetParams(params.data());
  if (absl::Status s = SaveParams(o.save_final, params); !s.ok()) {
    LogError("baseline", "%s", s.ToString().c_str());
    return 1;
  }
  Logf("baseline", "final: val_loss %.4f (start %.4f), %.0f tokens/s", last_val, first_val, tokens / secs);
  return 0;
}

}  // namespace muloco
