// Workers with models of their own (TorchModelWorker over ModelWorker, the library behind
// the Python package) against one RoundEngine in this process: two C++ training loops, each
// with a small LibTorch MLP that is not the built-in GPT and torch's AdamW, sync once per
// round. Every Sync leaves the worker's tensors holding the server's θ_pub bit for bit (with
// overlap: at the end, after the last flight lands), and the loss falls.
#include <gtest/gtest.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "codec/checksum.h"
#include "common/clock.h"
#include "common/run_config.h"
#include "inprocess/local_transport.h"
#include "server/round_engine.h"
#include "server/run_server.h"
#include "worker/torch_model_worker.h"

namespace muloco {
namespace {

constexpr int kIn = 8, kHidden = 16, kRounds = 12;

ParamLayout MlpLayout() {
  ParamLayout l{{"fc1.weight", {kHidden, kIn}}, {"fc1.bias", {kHidden}}, {"fc2.weight", {1, kHidden}},
                {"fc2.bias", {1}}};
  PlaceTensors(&l);
  EXPECT_TRUE(AssignGroups(kDefaultAdamwParams, &l).ok());
  return l;
}

v1::RunConfig MlpRun(uint64_t rounds) {
  v1::RunConfig c = *PresetConfig("muloco-2bit");
  c.set_inner_steps(8);
  c.set_total_rounds(rounds);
  c.set_eval_every(0);
  return c;
}

struct Mlp {
  std::vector<std::pair<std::string, torch::Tensor>> params{
      {"fc2.bias", torch::zeros({1})},  // not the run's order: the worker orders by name
      {"fc1.weight", torch::zeros({kHidden, kIn})},
      {"fc1.bias", torch::zeros({kHidden})},
      {"fc2.weight", torch::zeros({1, kHidden})}};
  Mlp() {
    for (auto& [_, t] : params) t.set_requires_grad(true);
  }
  torch::Tensor P(const std::string& name) const {
    for (const auto& [n, t] : params) {
      if (n == name) return t;
    }
    return {};
  }
  torch::Tensor Forward(const torch::Tensor& x) const {
    torch::Tensor h = torch::relu(torch::addmm(P("fc1.bias"), x, P("fc1.weight").t()));
    return torch::addmm(P("fc2.bias"), h, P("fc2.weight").t());
  }
  // Flat, in the run's layout order.
  std::vector<float> Flat(const ParamLayout& layout) const {
    std::vector<float> out;
    for (const ParamInfo& p : layout) {
      torch::Tensor t = P(p.name).detach().contiguous();
      out.insert(out.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
    return out;
  }
};

// The task both workers learn: a smooth function of a random direction.
torch::Tensor Target(const torch::Tensor& x, const torch::Tensor& w_star) {
  return torch::tanh(x.mm(w_star) / std::sqrt(static_cast<double>(kIn)));
}

struct Trained {
  absl::Status status;
  double first_loss = 0, last_loss = 0;  // on held-out inputs: θ_0, the final model
  int synced = 0, checksums_matched = 0;
  std::vector<float> final;
};

struct TwoWorkers {
  std::vector<Trained> workers;
  std::vector<float> theta_pub;
};

TwoWorkers RunTwo(bool overlap) {
  torch::set_num_threads(1);
  const ParamLayout layout = MlpLayout();
  const v1::RunConfig config = MlpRun(kRounds);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 0.3f);
  std::vector<float> initial(TotalParams(layout));
  for (float& v : initial) v = g(rng);
  ServerOptions so;
  so.round_timeout_s = 600;  // every worker is waited for
  SystemClock clock;
  RoundEngine engine(EngineOptionsFor(so, config, layout), initial, &clock);
  TwoWorkers run;
  run.workers.resize(2);
  std::vector<std::unique_ptr<LocalTransport>> transports;
  std::vector<std::unique_ptr<Mlp>> models;
  std::vector<std::unique_ptr<TorchModelWorker>> workers;
  for (int i = 0; i < 2; ++i) {
    transports.push_back(std::make_unique<LocalTransport>(&engine, config, layout));
    models.push_back(std::make_unique<Mlp>());
    WorkerOptions o;
    o.name = "mlp" + std::to_string(i);
    o.overlap = overlap;
    o.overlap_steps = overlap ? 2 : 0;
    workers.push_back(std::make_unique<TorchModelWorker>(o, transports.back().get(), "", models.back()->params));
    EXPECT_TRUE(workers.back()->Join().ok());  // both expected from round 0
  }
  torch::manual_seed(42);  // one task for both workers, each its own data
  const torch::Tensor w_star = torch::randn({kIn, 1});
  const torch::Tensor x_eval = torch::randn({256, kIn});
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      TorchModelWorker& w = *workers[i];
      Mlp& m = *models[i];
      Trained& out = run.workers[i];
      at::Generator data = at::detail::createCPUGenerator(100 + i);  // torch's global one is shared by the threads
      const auto eval = [&] {
        torch::NoGradGuard no_grad;
        return torch::mse_loss(m.Forward(x_eval), Target(x_eval, w_star)).item<double>();
      };
      out.first_loss = eval();
      std::vector<torch::Tensor> ps;
      for (auto& [_, t] : m.params) ps.push_back(t);
      torch::optim::AdamW opt(ps, torch::optim::AdamWOptions(1e-2).weight_decay(0));
      while (!w.done()) {
        double loss_sum = 0;
        for (uint32_t s = 0; s < config.inner_steps(); ++s) {
          const torch::Tensor x = torch::randn({16, kIn}, data);
          const torch::Tensor loss = torch::mse_loss(m.Forward(x), Target(x, w_star));
          opt.zero_grad();
          loss.backward();
          opt.step();
          loss_sum += loss.item<double>();
          absl::StatusOr<bool> landed = w.AfterStep();
          if (!landed.ok()) out.status = landed.status();
        }
        const double loss = loss_sum / config.inner_steps();
        absl::StatusOr<SyncResult> r = w.Sync(SyncReport{loss, 16 * config.inner_steps(), 0, 0});
        if (!r.ok()) {
          out.status = r.status();
          return;
        }
        ++out.synced;
        const std::vector<float> flat = m.Flat(layout);
        if (!r->in_flight && r->applied) out.checksums_matched += ParamChecksum(flat.data(), flat.size()) == r->checksum;
      }
      w.Leave();
      out.final = m.Flat(layout);
      out.last_loss = eval();
    });
  }
  for (std::thread& t : threads) t.join();
  run.theta_pub = *engine.Snapshot().params;
  return run;
}

TEST(ModelWorker, OwnModelsSyncToTheServersModelBitForBit) {
  const TwoWorkers run = RunTwo(/*overlap=*/false);
  for (const Trained& w : run.workers) {
    ASSERT_TRUE(w.status.ok()) << w.status;
    EXPECT_EQ(w.synced, kRounds);
    EXPECT_EQ(w.checksums_matched, kRounds);  // after every round, the tensors are θ_pub
    EXPECT_EQ(w.final, run.theta_pub);
    EXPECT_LT(w.last_loss, 0.2 * w.first_loss) << w.first_loss << " -> " << w.last_loss;
  }
}

TEST(ModelWorker, WithOverlapTheLastFlightLandsAsTheServersModel) {
  const TwoWorkers run = RunTwo(/*overlap=*/true);
  for (const Trained& w : run.workers) {
    ASSERT_TRUE(w.status.ok()) << w.status;
    EXPECT_EQ(w.synced, kRounds);
    EXPECT_EQ(w.final, run.theta_pub);
    EXPECT_LT(w.last_loss, 0.2 * w.first_loss) << w.first_loss << " -> " << w.last_loss;
  }
}

}  // namespace
}  // namespace muloco
