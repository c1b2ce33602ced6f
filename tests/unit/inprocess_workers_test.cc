// N real workers (RunWorkerOver: LibTorch training, error feedback, the replica's checks)
// against one RoundEngine in this process, through LocalTransport: the worker core's
// transport seam. Replicas must end bit-identical to the engine's θ_pub.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/run_config.h"
#include "server/round_engine.h"
#include "server/run_server.h"
#include "inprocess/local_transport.h"
#include "worker/session.h"

namespace muloco {
namespace {

v1::RunConfig TinyRun(const std::string& preset, uint64_t rounds) {
  v1::RunConfig c = *PresetConfig(preset);
  v1::ModelSpec* m = c.mutable_model();
  m->set_n_layer(1);
  m->set_n_head(2);
  m->set_d_model(32);
  m->set_context(16);
  c.set_batch_size(4);
  if (c.inner_steps() > 1) c.set_inner_steps(3);  // SignMuon takes one step per round
  c.set_total_rounds(rounds);
  c.set_eval_every(0);
  c.set_eval_batches(1);
  EXPECT_TRUE(ValidateRunConfig(c).ok()) << ValidateRunConfig(c);
  return c;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

struct Outcome {
  std::vector<int> codes;
  std::vector<std::vector<float>> finals;
  EngineStats stats;
  std::vector<float> theta_pub;
  std::vector<uint64_t> fetches;  // complete model fetches per worker
};

// The engine starts from `initial` (empty: InitParams, as muloco-server does); every worker's
// first `faulty_rounds` updates are made non-finite (WorkerOptions::fault_nonfinite_rounds).
Outcome RunInProcess(const v1::RunConfig& config, int workers, std::vector<float> initial = {},
                     bool init_from_seed = true, uint32_t faulty_rounds = 0) {
  torch::set_num_threads(1);
  const ParamLayout layout = BuiltinLayout(config.model());
  ServerOptions so;
  so.round_timeout_s = 600;  // every worker is waited for
  SystemClock clock;
  if (initial.empty()) initial = InitParams(config.model(), layout);
  RoundEngine engine(EngineOptionsFor(so, config, layout), std::move(initial), &clock);
  Outcome out;
  out.codes.assign(workers, -1);
  std::vector<std::string> paths;
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    paths.push_back(testing::TempDir() + "/inproc_" + config.preset() + "_" + std::to_string(i) + ".f32");
    std::remove(paths.back().c_str());
  }
  // Every worker joins before any pushes, so that all are expected from round 0.
  std::vector<std::unique_ptr<LocalTransport>> transports;
  for (int i = 0; i < workers; ++i) transports.push_back(std::make_unique<LocalTransport>(&engine, config));
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&, i] {
      WorkerOptions o;
      o.name = "w" + std::to_string(i);
      o.save_final = paths[i];
      o.heartbeat_s = 0.5;
      o.progress_s = 0;
      o.init_from_seed = init_from_seed;
      o.fault_nonfinite_rounds = faulty_rounds;
      out.codes[i] = RunWorkerOver(o, transports[i].get(), "");
    });
  }
  std::atomic<bool> ticking{true};
  std::thread ticker([&] {
    while (ticking) {
      engine.Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  for (std::thread& t : threads) t.join();
  ticking = false;
  ticker.join();
  for (const std::string& p : paths) out.finals.push_back(ReadFloats(p));
  out.stats = engine.Stats();
  out.theta_pub = *engine.Snapshot().params;
  for (const auto& t : transports) out.fetches.push_back(t->fetches());
  return out;
}

void ExpectReplicasAreTheEngines(const Outcome& out) {
  for (const std::vector<float>& f : out.finals) {
    ASSERT_EQ(f.size(), out.theta_pub.size());
    EXPECT_EQ(std::memcmp(f.data(), out.theta_pub.data(), f.size() * sizeof(float)), 0);
  }
}

TEST(InProcessWorkers, ThreeMuLoCoWorkersEndBitIdenticalToTheEngine) {
  const v1::RunConfig config = TinyRun("muloco-2bit", 4);
  const Outcome out = RunInProcess(config, 3);
  for (int code : out.codes) EXPECT_EQ(code, 0);
  EXPECT_EQ(out.stats.rounds_closed, 4u);
  EXPECT_EQ(out.stats.pushes_accepted, 4u * 3);  // nobody missed a round
  EXPECT_EQ(out.stats.last_contributors, 3u);
  ASSERT_EQ(out.theta_pub.size(), TotalParams(BuiltinLayout(config.model())));
  ExpectReplicasAreTheEngines(out);
  // The model moved: training happened.
  const std::vector<float> init = InitParams(config.model(), BuiltinLayout(config.model()));
  EXPECT_NE(std::memcmp(init.data(), out.theta_pub.data(), init.size() * sizeof(float)), 0);
  // A fresh run's initial model is built from the config's seed: nothing was fetched.
  EXPECT_EQ(out.fetches, std::vector<uint64_t>(3, 0));
}

TEST(InProcessWorkers, AnInitialModelOtherThanTheSeedsIsFetched) {
  const v1::RunConfig config = TinyRun("muloco-2bit", 2);
  std::vector<float> initial = InitParams(config.model(), BuiltinLayout(config.model()));
  initial[7] += 0.5f;  // what the seed gives, but for one parameter: the checksums differ
  const Outcome out = RunInProcess(config, 2, initial);
  for (int code : out.codes) EXPECT_EQ(code, 0);
  EXPECT_EQ(out.fetches, std::vector<uint64_t>(2, 1));
  ExpectReplicasAreTheEngines(out);
  // And with --init_from_seed=false every worker fetches even the seed's model.
  const Outcome fetched = RunInProcess(config, 2, {}, /*init_from_seed=*/false);
  EXPECT_EQ(fetched.fetches, std::vector<uint64_t>(2, 1));
  ExpectReplicasAreTheEngines(fetched);
}

TEST(InProcessWorkers, TheSeededBuildStandsForOneFetchOnly) {
  // The worker builds round 0's model, then its first update is non-finite: it drops it and
  // resyncs, and that resync fetches (a second build would match the Join's stale checksum
  // whatever round the server is at).
  const v1::RunConfig config = TinyRun("muloco-2bit", 2);
  const Outcome out = RunInProcess(config, 1, {}, /*init_from_seed=*/true, /*faulty_rounds=*/1);
  EXPECT_EQ(out.codes, std::vector<int>{0});
  EXPECT_EQ(out.fetches, std::vector<uint64_t>{1});
  EXPECT_EQ(out.stats.rounds_closed, 2u);
  ExpectReplicasAreTheEngines(out);
}

TEST(InProcessWorkers, SignMuonWorkersVoteThroughTheSameSeam) {
  const v1::RunConfig config = TinyRun("signmuon", 3);
  const Outcome out = RunInProcess(config, 2);
  for (int code : out.codes) EXPECT_EQ(code, 0);
  EXPECT_EQ(out.stats.rounds_closed, 3u);
  ExpectReplicasAreTheEngines(out);
}

TEST(LocalTransport, SpeaksTheEngineCodes) {
  const v1::RunConfig config = TinyRun("diloco", 2);
  const ParamLayout layout = BuiltinLayout(config.model());
  FakeClock clock;
  RoundEngine engine(EngineOptionsFor(ServerOptions{}, config, layout), InitParams(config.model(), layout), &clock);
  LocalTransport t(&engine, config);
  EXPECT_EQ(t.FetchModel(12345).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<v1::JoinResponse> j = t.Join("a", "");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->num_params(), TotalParams(layout));
  EXPECT_EQ(j->config().SerializeAsString(), config.SerializeAsString());
  absl::StatusOr<FetchedModel> m = t.FetchModel(j->worker_id());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->checksum, j->model_checksum());
  EXPECT_EQ(t.Push(j->worker_id(), 0, "garbage", {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Push(j->worker_id(), 7, "garbage", {}).code(), absl::StatusCode::kFailedPrecondition);
  t.CancelAwaits();
  EXPECT_EQ(t.AwaitRound(j->worker_id(), 0).status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(t.Leave(j->worker_id()).ok());
  EXPECT_EQ(t.FetchModel(j->worker_id()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace muloco
