// Newton–Schulz's singular values stay in the documented band for random, ill-conditioned,
// tall and wide matrices; the server's plain-C++ polar step agrees with the LibTorch one;
// Muon takes exactly the hidden matrices.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "common/run_config.h"
#include "kernels/newton_schulz.h"
#include "worker/data.h"
#include "worker/muon.h"
#include "worker/trainer.h"

namespace muloco {
namespace {

const std::array<double, 3> kCoeffs = kernels::kNewtonSchulzCoeffs;

// A rows x cols matrix with singular values spread log-uniformly over [1/cond, 1].
torch::Tensor WithCondition(int64_t rows, int64_t cols, double cond, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t k = std::min(rows, cols);
  torch::Tensor u = std::get<0>(torch::linalg::qr(torch::randn({rows, k})));
  torch::Tensor v = std::get<0>(torch::linalg::qr(torch::randn({cols, k})));
  torch::Tensor s = torch::pow(cond, -torch::linspace(0, 1, k));
  return torch::matmul(u * s, v.t());
}

torch::Tensor SingularValues(const torch::Tensor& m) { return std::get<1>(torch::svd(m)); }

double MinSingularValue(const torch::Tensor& m) { return SingularValues(m).min().item<double>(); }

void ExpectBand(const torch::Tensor& g, int steps, const std::string& what) {
  torch::Tensor sv = SingularValues(NewtonSchulz(g, steps, kCoeffs));
  EXPECT_GE(sv.min().item<double>(), 0.5) << what;
  EXPECT_LE(sv.max().item<double>(), 1.5) << what;
}

TEST(NewtonSchulz, SingularValuesInBand) {
  torch::manual_seed(1);
  ExpectBand(torch::randn({64, 64}), 5, "square random");
  ExpectBand(torch::randn({256, 64}), 5, "tall random");
  ExpectBand(torch::randn({64, 256}), 5, "wide random");
  ExpectBand(WithCondition(64, 64, 1e2, 2), 5, "condition 1e2");
  ExpectBand(WithCondition(128, 32, 1e2, 3), 5, "tall, condition 1e2");
  ExpectBand(WithCondition(64, 64, 1e4, 4), 10, "condition 1e4 needs more steps");
  // The documented limit: 5 steps leave the smallest of a 1e4-conditioned matrix far below.
  EXPECT_LT(MinSingularValue(NewtonSchulz(WithCondition(64, 64, 1e4, 4), 5, kCoeffs)), 0.5);
}

TEST(NewtonSchulz, ServerPolarStepMatchesLibTorch) {
  for (auto [r, c] : {std::pair<int64_t, int64_t>{12, 40}, {40, 12}, {16, 16}}) {
    torch::Tensor g = torch::randn({r, c});
    std::vector<float> m(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    PolarNewtonSchulz(m.data(), r, c, 5);
    torch::Tensor want = (NewtonSchulz(g, 5, kCoeffs) * std::sqrt(static_cast<double>(std::max(r, c)))).contiguous();
    for (int64_t i = 0; i < g.numel(); ++i) ASSERT_NEAR(m[i], want.data_ptr<float>()[i], 1e-4) << r << "x" << c;
  }
  std::vector<float> zero(12, 0.0f);
  PolarNewtonSchulz(zero.data(), 3, 4, 5);
  for (float v : zero) EXPECT_EQ(v, 0.0f);
}

TEST(NewtonSchulz, WorkerLibTorchMatchesTheCpuReference) {
  // One Newton-Schulz: the worker's LibTorch version and the kernels/ reference agree, for
  // each orientation and several step counts. The reference iterates on the matrix itself; the
  // worker, on the CPU, evaluates the same function of the Gram matrix from its fp64
  // eigendecomposition (square, tall and wide shapes, and a rank-3 one whose zero singular
  // values stay zero).
  torch::manual_seed(7);
  const auto random = [](int64_t r, int64_t c) { return torch::randn({r, c}); };
  const auto rank3 = [](int64_t r, int64_t c) { return torch::matmul(torch::randn({r, 3}), torch::randn({3, c})); };
  for (auto [r, c, make] : {std::tuple{24, 64, +random}, {64, 24, +random}, {32, 32, +random}, {64, 64, +random},
                            {16, 128, +random}, {40, 64, +random}, {48, 40, +rank3}}) {
    for (int steps : {0, 1, 3, 5}) {
      torch::Tensor g = make(r, c);
      std::vector<float> m(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
      kernels::cpu::NewtonSchulz(m.data(), r, c, steps);
      torch::Tensor want = NewtonSchulz(g, steps, kCoeffs).contiguous();
      for (int64_t i = 0; i < g.numel(); ++i) {
        ASSERT_NEAR(m[i], want.data_ptr<float>()[i], 2e-5) << r << "x" << c << " steps " << steps;
      }
    }
  }
}

TEST(NewtonSchulz, NonFiniteInputStaysNonFinite) {
  // A NaN skips the eigendecomposition: the plain iteration runs instead and carries it.
  torch::Tensor g = torch::randn({8, 16});
  g[2][3] = std::nan("");
  EXPECT_FALSE(torch::isfinite(NewtonSchulz(g, 5, kCoeffs)).all().item<bool>());
}

TEST(Muon, RoutesHiddenMatricesOnly) {
  v1::RunConfig c = *PresetConfig("muloco");
  Corpus corpus;
  corpus.train.assign(1000, 1);
  corpus.val.assign(1000, 1);
  c.set_eval_batches(0);
  Trainer trainer(c, &corpus, 0);
  std::vector<std::string> want;
  for (uint32_t l = 0; l < c.model().n_layer(); ++l) {
    for (const char* t : {"attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight"}) {
      want.push_back("h." + std::to_string(l) + "." + t);
    }
  }
  EXPECT_EQ(trainer.MuonTensorNames(), want);
  c.set_inner_optimizer("adamw");
  EXPECT_TRUE(Trainer(c, &corpus, 0).MuonTensorNames().empty());
}

TEST(Muon, ShapeScales) {
  EXPECT_DOUBLE_EQ(MuonShapeScale(256, 64, MuonScale::kShape), 2.0);
  EXPECT_DOUBLE_EQ(MuonShapeScale(64, 256, MuonScale::kShape), 1.0);
  EXPECT_DOUBLE_EQ(MuonShapeScale(64, 256, MuonScale::kMatchAdamW), 0.2 * 16);
}

}  // namespace
}  // namespace muloco
