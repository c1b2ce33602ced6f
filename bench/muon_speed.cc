// Muon's cost, in one run: a whole inner step of the demo model with Muon + AdamW next to
// AdamW alone (Muon's share of a step), and Newton–Schulz on each hidden-matrix shape next
// to the same matmuls issued directly (NS's overhead over its arithmetic).
// Usage: muon_speed [--steps=20] [--threads=1] [--device=cuda]
// --device=cuda: Newton–Schulz alone on a GPU (bf16, as Muon runs it there) on the hidden-matrix
// shapes of GPT-2 small and a 1B model, next to the same matmuls.
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/model_layout.h"
#include "common/run_config.h"
#include "kernels/newton_schulz.h"
#include "worker/data.h"
#include "worker/muon.h"
#include "worker/trainer.h"

using namespace muloco;

namespace {

bool cuda = false;  // --device=cuda: wait for the GPU around each timed op

double BestMs(int reps, const std::function<void()>& op) {
  op();  // warm up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    if (cuda) torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    if (cuda) torch::cuda::synchronize();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double StepMs(const std::string& optimizer, const Corpus& corpus, int steps) {
  v1::RunConfig c = *PresetConfig("muloco");
  c.set_inner_optimizer(optimizer);
  c.set_eval_batches(0);
  Trainer t(c, &corpus, 1);
  std::vector<float> p = InitParams(c.model(), BuiltinLayout(c.model()));
  t.SetParams(p.data());
  uint64_t step = 0;
  return BestMs(steps, [&] { t.InnerStep(step++); });
}

// Newton–Schulz (5 steps) on each shape next to the same 15 matmuls issued directly.
void NewtonSchulzTable(const std::vector<std::pair<int64_t, int64_t>>& shapes, torch::Device device) {
  std::printf("%-12s %12s %18s %8s   (%s)\n", "shape", "NS 5 steps", "same matmuls", "ratio", device.str().c_str());
  const std::array<double, 3> coeffs = kernels::kNewtonSchulzCoeffs;
  // NewtonSchulz works in bf16 on a GPU: the reference matmuls do too.
  const auto opts = torch::TensorOptions(device.is_cuda() ? torch::kBFloat16 : torch::kFloat32).device(device);
  for (auto [r, k] : shapes) {
    torch::Tensor g = torch::randn({r, k}, torch::TensorOptions(torch::kFloat32).device(device));
    const double ns = BestMs(5, [&] { NewtonSchulz(g, 5, coeffs); });
    const int64_t m = std::min(r, k), w = std::max(r, k);
    torch::Tensor x = torch::randn({m, w}, opts), a = torch::randn({m, m}, opts);
    const double mm = BestMs(5, [&] {
      for (int i = 0; i < 5; ++i) {
        torch::matmul(x, x.t());
        torch::matmul(a, a);
        torch::matmul(a, x);
      }
    });
    std::printf("%4ldx%-7ld %10.3f ms %15.3f ms %8.2f\n", static_cast<long>(r), static_cast<long>(k), ns, mm, ns / mm);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20, threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--steps=", 8)) steps = std::atoi(argv[i] + 8);
    if (!std::strncmp(argv[i], "--threads=", 10)) threads = std::atoi(argv[i] + 10);
    if (!std::strcmp(argv[i], "--device=cuda")) cuda = true;
  }
  if (cuda) {
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "muon_speed: --device=cuda: this LibTorch sees no GPU\n");
      return 2;
    }
    NewtonSchulzTable({{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {2048, 8192}, {8192, 2048}},
                      torch::Device(torch::kCUDA));
    return 0;
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
  for (const ParamInfo& p : BuiltinLayout(c.model())) {
    if (!UsesMuon(p.group)) continue;
    mats.push_back(torch::randn(p.shape));
    mats.back().mutable_grad() = torch::randn(p.shape);
  }
  Muon opt(mats, MuonOptions{});
  const double muon_step = BestMs(steps, [&] { opt.Step(0.02); });
  std::printf("Muon::Step alone (%zu matrices): %.2f ms = %.1f%% of a Muon + AdamW step\n\n", mats.size(), muon_step,
              100.0 * muon_step / muon);

  NewtonSchulzTable({{64, 192}, {64, 64}, {64, 256}, {256, 1024}}, torch::kCPU);
  return 0;
}
