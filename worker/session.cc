// RunWorker / RunBaseline (see session.h). Status policy: UNAVAILABLE retries Join;
// FAILED_PRECONDITION or a checksum mismatch resyncs by fetching the model; NOT_FOUND
// (evicted) joins again; anything else ends the worker with the error.
#include "worker/session.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/codec.h"
#include "common/log.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "worker/client.h"
#include "worker/data.h"
#include "worker/trainer.h"

namespace muloco {
namespace {

bool SaveParams(const std::string& path, const std::vector<float>& p) {
  if (path.empty()) return true;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(p.size() * sizeof(float)));
  return static_cast<bool>(out);
}

absl::StatusOr<Corpus> LoadData(const WorkerOptions& o, const v1::RunConfig& c) {
  return LoadCorpus(o.data.empty() ? kDefaultCorpus : o.data, o.val_data, c.model().vocab_size(), c.model().context());
}

// Sends heartbeats every period_s until destroyed.
class HeartbeatThread {
 public:
  HeartbeatThread(ServerClient* client, uint64_t id, double period_s)
      : thread_([=] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, std::chrono::duration<double>(period_s), [&] { return stop_; })) {
            lock.unlock();
            client->Heartbeat(id).IgnoreError();  // a failure shows up on the next real call
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

absl::StatusOr<v1::JoinResponse> JoinWithRetry(ServerClient& client, const WorkerOptions& o, const std::string& name) {
  const auto start = std::chrono::steady_clock::now();
  double backoff = 0.1;
  for (;;) {
    absl::StatusOr<v1::JoinResponse> j = client.Join(name);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (j.ok() || j.status().code() != absl::StatusCode::kUnavailable || waited > o.connect_timeout_s) return j;
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(2.0, backoff * 2);
  }
}

}  // namespace

int RunWorker(const WorkerOptions& o) {
  ClientOptions co;
  ServerClient client(o.server, co);
  const std::string name = o.name.empty() ? absl::StrCat("worker-", getpid()) : o.name;
  absl::StatusOr<v1::JoinResponse> joined = JoinWithRetry(client, o, name);
  if (!joined.ok()) {
    std::fprintf(stderr, "muloco-worker: cannot join %s: %s\n", o.server.c_str(), joined.status().ToString().c_str());
    return 1;
  }
  const v1::RunConfig config = joined->config();
  if (absl::Status s = ValidateRunConfig(config); !s.ok()) {
    std::fprintf(stderr, "muloco-worker: server sent a bad config: %s\n", s.ToString().c_str());
    return 1;
  }
  uint64_t id = joined->worker_id();
  const std::string tag = absl::StrCat("worker ", id);
  const size_t n = TotalParams(GptLayout(config.model()));
  if (joined->num_params() != n) {
    std::fprintf(stderr, "muloco-worker: server has %llu parameters, the config implies %zu\n",
                 static_cast<unsigned long long>(joined->num_params()), n);
    return 1;
  }
  absl::StatusOr<Corpus> corpus = LoadData(o, config);
  if (!corpus.ok()) {
    std::fprintf(stderr, "muloco-worker: data: %s\n", corpus.status().ToString().c_str());
    return 1;
  }
  const ParamLayout layout = GptLayout(config.model());
  const std::vector<Segment> uplink = PlanSegments(CodecShapes(layout), *ParseCodec(config.uplink_codec()));
  Logf(tag.c_str(), "joined %s as %s at round %llu: %s; data %s", o.server.c_str(), name.c_str(),
       static_cast<unsigned long long>(joined->round()), DescribeRunConfig(config).c_str(),
       corpus->description.c_str());
  Trainer trainer(config, &*corpus, config.data_seed() + id);

  auto heartbeat = std::make_unique<HeartbeatThread>(&client, id, o.heartbeat_s);
  FetchedModel pub;
  auto resync = [&]() -> absl::Status {
    absl::StatusOr<FetchedModel> m = client.FetchModel(id);
    if (!m.ok()) return m.status();
    pub = *std::move(m);
    Logf(tag.c_str(), "fetched model at round %llu (%zu parameters)", static_cast<unsigned long long>(pub.round),
         pub.params.size());
    return absl::OkStatus();
  };
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "muloco-worker: %s\n", s.ToString().c_str());
    heartbeat.reset();
    client.Leave(id).IgnoreError();
    return 1;
  };
  if (absl::Status s = resync(); !s.ok()) return fail(s);

  const double dense = static_cast<double>(PayloadBytes(DenseSegments(n)));
  std::vector<float> delta(n), ef(n, 0.0f);  // error feedback persists across rounds
  const bool signmuon = config.mode() == "signmuon";
  uint64_t rounds_done = 0, bytes_up = 0, bytes_down = 0;
  double first_val = -1, last_val = -1;
  auto evaluate = [&](uint64_t round) {
    last_val = trainer.Evaluate(pub.params.data());
    if (first_val < 0) first_val = last_val;
    Logf(tag.c_str(), "eval: round %llu val_loss %.4f", static_cast<unsigned long long>(round), last_val);
  };
  for (;;) {
    const uint64_t r = pub.round;
    if (config.eval_every() && r % config.eval_every() == 0) evaluate(r);
    std::vector<float> ef_next = ef;
    double train_loss = 0;
    std::string payload;
    if (signmuon) {
      // The vote needs only each coordinate's sign: no error feedback.
      train_loss = trainer.SignDirection(pub.params.data(), delta.data());
      payload = Compress(uplink, nullptr, 1.0f, delta.data());
    } else {
      // ef is updated only once the push is accepted, so a refused push loses nothing.
      train_loss = trainer.TrainRound(pub.params.data(), r * config.inner_steps(), delta.data());
      payload = Compress(uplink, delta.data(), config.ef_beta(), ef_next.data());
    }
    absl::Status pushed = client.Push(id, r, payload, static_cast<float>(train_loss));
    if (pushed.code() == absl::StatusCode::kFailedPrecondition) {
      Logf(tag.c_str(), "push for round %llu refused (%s); resyncing", static_cast<unsigned long long>(r),
           std::string(pushed.message()).c_str());
      if (absl::Status s = resync(); !s.ok()) return fail(s);
      continue;
    }
    if (!pushed.ok()) return fail(pushed);
    ef.swap(ef_next);
    absl::StatusOr<RoundResult> result = client.AwaitRound(id, r);
    if (result.status().code() == absl::StatusCode::kFailedPrecondition) {
      if (absl::Status s = resync(); !s.ok()) return fail(s);
      continue;
    }
    if (!result.ok()) return fail(result.status());
    absl::Status applied = DecodeAccumulate(result->payload, n, pub.params.data());
    if (!applied.ok() || ParamChecksum(pub.params.data(), n) != result->checksum) {
      Logf(tag.c_str(), "round %llu: update %s; fetching the model", static_cast<unsigned long long>(r),
           applied.ok() ? "checksum mismatch" : applied.ToString().c_str());
      if (absl::Status s = resync(); !s.ok()) return fail(s);
    } else {
      pub.round = result->next_round;
      pub.checksum = result->checksum;
    }
    ++rounds_done;
    bytes_up += payload.size();
    bytes_down += result->payload.size();
    Logf(tag.c_str(),
         "round %llu: train_loss %.4f, up %zu bytes (%.1fx smaller than dense fp32), down %zu bytes (%.1fx), "
         "%u contributors, checksum %016llx ok",
         static_cast<unsigned long long>(r), train_loss, payload.size(), dense / payload.size(),
         result->payload.size(), dense / result->payload.size(), result->contributors,
         static_cast<unsigned long long>(pub.checksum));
    if (result->done) break;
  }
  evaluate(pub.round);
  heartbeat.reset();
  client.Leave(id).IgnoreError();
  if (!SaveParams(o.save_final, pub.params)) {
    std::fprintf(stderr, "muloco-worker: cannot write %s\n", o.save_final.c_str());
    return 1;
  }
  Logf(tag.c_str(), "final: val_loss %.4f (start %.4f) after %llu rounds; up %llu bytes, down %llu bytes; checksum %016llx",
       last_val, first_val, static_cast<unsigned long long>(rounds_done), static_cast<unsigned long long>(bytes_up),
       static_cast<unsigned long long>(bytes_down), static_cast<unsigned long long>(pub.checksum));
  return 0;
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
  if (!SaveParams(o.save_final, params)) return 1;
  Logf("baseline", "final: val_loss %.4f (start %.4f), %.0f tokens/s", last_val, first_val, tokens / secs);
  return 0;
}

}  // namespace muloco
