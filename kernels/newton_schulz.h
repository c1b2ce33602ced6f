// Newton–Schulz: the polar factor U V^T of a matrix, by the quintic iteration of Muon
// (Keller Jordan): X /= ||X||_F + 1e-7; repeat: A = X X^T, B = b A + c A^2, X = a X + B X,
// on the wide orientation (transpose tall matrices). The CPU reference lives here in plain
// fp32 loops: the server's SignMuon polar step runs it, and the worker's LibTorch version
// (worker/muon.cc, bf16 on CUDA) is tested against it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

namespace muloco::kernels {

// Muon's coefficients (a, b, c).
inline constexpr std::array<double, 3> kNewtonSchulzCoeffs = {3.4445, -4.7750, 2.0315};

namespace cpu {

// m (rows x cols, row-major) <- NS_steps(m / ||m||_F) * scale. A zero matrix stays zero.
// O(rows * cols * min(rows, cols)) per step: fine for the server's vote on test and demo
// models; large models want the worker-side (LibTorch) version.
void NewtonSchulz(float* m, size_t rows, size_t cols, int steps, float scale = 1.0f,
                  const std::array<double, 3>& coeffs = kNewtonSchulzCoeffs);

}  // namespace cpu
}  // namespace muloco::kernels

namespace muloco {

// The server's SignMuon polar step: sqrt(max(rows, cols)) * NS_steps(m / ||m||_F), an RMS of
// about 1, like the sign vote it replaces.
inline void PolarNewtonSchulz(float* m, size_t rows, size_t cols, int steps) {
  kernels::cpu::NewtonSchulz(m, rows, cols, steps, std::sqrt(static_cast<float>(std::max(rows, cols))));
}

}  // namespace muloco
