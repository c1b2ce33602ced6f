// Muon's cost, in one run: a whole inner step of the demo model with Muon + AdamW next to
// AdamW alone (Muon's share of a step), and Newton–Schulz on each hidden-matrix shape next
// to the same matmuls issued directly (NS's overhead over its arithmetic).
// Usage: muon_speed [--steps=20] [--threads=1]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "common/model_layout.h"
#include "common/run_config.h"
#include "kernels/newton_schulz.h"
#include "worker/data.h"
#include "worker/muon.h"
#include "worker/trainer.h"

using namespace muloco;

namespace {

double BestMs(int reps, const std::function<void()>& op) {
  op();  // warm up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    op();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double StepMs(const std::string& optimizer, const Corpus& corpus, int steps) {
  v1::RunConfig c = *PresetConfig("muloco");
  c.set_inner_optimizer(optimizer);
  c.set_eval_batches(0);
  Trainer t(c, &corpus, 1);
  std::vector<float> p = InitParams(c.model(), GptLayout(c.model()));
  t.SetParams(p.data());
  uint64_t step = 0;
  return BestMs(steps, [&] { t.InnerStep(step++); });
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20, threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--steps=", 8)) steps = std::atoi(argv[i] + 8);
    if (!std::strncmp(argv[i], "--threads=", 10)) threads = std::atoi(argv[i] + 10);
  }
  at::set_num_threads(threads);
  const v1::RunConfig c = *PresetConfig("muloco");
  absl::StatusOr<Corpus> corpus = LoadCorpus(kDefaultCorpus, "", 256, c.model().context());
  if (!corpus.ok()) {
    std::fprintf(stderr, "%s\n", corpus.status().ToString().c_str());
    return 1;
  }
  std::printf("demo model (muloco preset), batch %u x context %u, %d threads, best of %d steps\n", c.batch_size(),
              c.model().context(), threads, steps);
  const double adamw = StepMs("adamw", *corpus, steps), muon = StepMs("muon", *corpus, steps);
  std::printf("inner step, AdamW only:   %8.2f ms\n", adamw);
  std::printf("inner step, Muon + AdamW: %8.2f ms  (Muon adds %.2f ms = %.1f%% of the step)\n", muon, muon - adamw,
              100.0 * (muon - adamw) / muon);

  // Muon's step alone on the model's hidden matrices, with random gradients.
  std::vector<torch::Tensor> mats;
  for (const ParamInfo& p : GptLayout(c.model())) {
    if (!UsesMuon(p.kind)) continue;
    mats.push_back(torch::randn(p.shape));
    mats.back().mutable_grad() = torch::randn(p.shape);
  }
  Muon opt(mats, MuonOptions{});
  const double muon_step = BestMs(steps, [&] { opt.Step(0.02); });
  std::printf("Muon::Step alone (%zu matrices): %.2f ms = %.1f%% of a Muon + AdamW step\n\n", mats.size(), muon_step,
              100.0 * muon_step / muon);

  std::printf("%-12s %12s %18s %8s\n", "shape", "NS 5 steps", "same matmuls", "ratio");
  const std::array<double, 3> coeffs = kernels::kNewtonSchulzCoeffs;
  for (auto [r, k] : {std::pair<int64_t, int64_t>{64, 192}, {64, 64}, {64, 256}, {256, 1024}}) {
    torch::Tensor g = torch::randn({r, k});
    const double ns = BestMs(5, [&] { NewtonSchulz(g, 5, coeffs); });
    torch::Tensor x = torch::randn({r, k}), a = torch::randn({r, r});
    const double mm = BestMs(5, [&] {
      for (int i = 0; i < 5; ++i) {
        torch::matmul(x, x.t());
        torch::matmul(a, a);
        torch::matmul(a, x);
      }
    });
    std::printf("%4ldx%-7ld %10.3f ms %15.3f ms %8.2f\n", static_cast<long>(r), static_cast<long>(k), ns, mm, ns / mm);
  }
  return 0;
}
