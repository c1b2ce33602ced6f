// Muon and Newton–Schulz (see muon.h).
#include "worker/muon.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

namespace muloco {

namespace {

// The same iteration through the m x m Gram matrix A = x x^T of the wide (m <= n) normalised x:
// a step maps x to p(x x^T) x with p(t) = a + b t + c t^2, and each new Gram matrix is a
// polynomial in A, so all steps together give x_steps = f(A) x for one matrix function f. With
// A = V diag(lambda) V^T (eigh, in fp64: the m x m matrix is small and its small eigenvalues
// need the digits), f(A) = V diag(f(lambda)) V^T, where each eigenvalue follows the same steps
// as a number: m = p(lambda), f *= m, lambda *= m^2. The same iterates in exact arithmetic;
// m^2 n fp64 + m^2 n fp32 and ~10 m^3 fp64 multiply-adds against 5 (2 m^2 n + m^3). Empty for
// a non-finite x (LAPACK's handling of NaN differs between builds) and where eigh fails: the
// caller iterates on x itself.
std::optional<torch::Tensor> SpectralNewtonSchulz(const torch::Tensor& x, int steps, double a, double b, double c) {
  if (!torch::isfinite(x).all().item<bool>()) return std::nullopt;
  const torch::Tensor xd = x.to(torch::kFloat64);
  torch::Tensor lambda, v;
  try {
    std::tie(lambda, v) = torch::linalg::eigh(torch::matmul(xd, xd.t()), "L");
  } catch (const c10::Error&) {
    return std::nullopt;
  }
  torch::Tensor f = torch::ones_like(lambda);
  for (int i = 0; i < steps; ++i) {
    const torch::Tensor m = a + lambda * (b + c * lambda);
    f = f * m;
    lambda = lambda * m * m;
  }
  return torch::matmul(torch::matmul(v * f, v.t()).to(x.scalar_type()), x);
}

}  // namespace

torch::Tensor NewtonSchulz(const torch::Tensor& g, int steps, const std::array<double, 3>& coeffs) {
  const auto [a, b, c] = coeffs;
  torch::Tensor x = g.is_cuda() ? g.to(torch::kBFloat16) : g.to(torch::kFloat32);
  const bool tall = g.size(0) > g.size(1);
  if (tall) x = x.t();
  x = x / (x.norm() + 1e-7);
  std::optional<torch::Tensor> spectral;
  if (!g.is_cuda() && steps > 0) spectral = SpectralNewtonSchulz(x, steps, a, b, c);
  if (spectral) {
    x = *spectral;
  } else {
    for (int i = 0; i < steps; ++i) {
      torch::Tensor A = torch::matmul(x, x.t());
      torch::Tensor B = b * A + c * torch::matmul(A, A);
      x = a * x + torch::matmul(B, x);
    }
  }
  if (tall) x = x.t();
  return x.to(g.scalar_type());
}

Muon::Muon(std::vector<torch::Tensor> params, MuonOptions options) : params_(std::move(params)), options_(options) {
  for (const torch::Tensor& p : params_) {
    TORCH_CHECK(p.dim() == 2, "Muon takes 2-D parameters only");
    momentum_.push_back(torch::zeros_like(p));
  }
}

torch::Tensor Muon::Direction(size_t i) {
  torch::NoGradGuard no_grad;
  const torch::Tensor& p = params_[i];
  torch::Tensor g = p.grad().defined() ? p.grad() : torch::zeros_like(p);
  torch::Tensor& buf = momentum_[i];
  const double beta = options_.momentum;
  buf.lerp_(g, 1.0 - beta);
  torch::Tensor update = options_.nesterov ? g.lerp(buf, beta) : buf;
  update = NewtonSchulz(update, options_.ns_steps, options_.ns_coeffs);
  return update * MuonShapeScale(p.size(0), p.size(1), options_.scale);
}

void Muon::Step(double lr) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor update = Direction(i);
    torch::Tensor& p = params_[i];
    if (options_.weight_decay != 0) p.mul_(1.0 - lr * options_.weight_decay);
    p.add_(update, -lr);
  }
}

}  // namespace muloco
