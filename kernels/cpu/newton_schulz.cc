// The CPU reference Newton–Schulz (see kernels/newton_schulz.h).
#include "kernels/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace muloco::kernels::cpu {
namespace {

// c (r x k) = a (r x n) * b (n x k), all row-major.
void MatMul(const float* a, const float* b, float* c, size_t r, size_t n, size_t k) {
  std::fill(c, c + r * k, 0.0f);
  for (size_t i = 0; i < r; ++i)
    for (size_t t = 0; t < n; ++t) {
      const float av = a[i * n + t];
      for (size_t j = 0; j < k; ++j) c[i * k + j] += av * b[t * k + j];
    }
}

}  // namespace

void NewtonSchulz(float* m, size_t rows, size_t cols, int steps, float scale, const std::array<double, 3>& coeffs) {
  const float a = static_cast<float>(coeffs[0]), b = static_cast<float>(coeffs[1]), c = static_cast<float>(coeffs[2]);
  // Work on x (r x k) with r <= k: transpose tall matrices.
  const bool tall = rows > cols;
  const size_t r = tall ? cols : rows, k = tall ? rows : cols;
  std::vector<float> x(r * k), xt(k * r), A(r * r), AA(r * r), B(r * r), BX(r * k);
  double norm = 0;
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) {
      const float v = m[i * cols + j];
      norm += static_cast<double>(v) * v;
      (tall ? x[j * k + i] : x[i * k + j]) = v;
    }
  if (norm == 0) return;
  const float inv = static_cast<float>(1.0 / (std::sqrt(norm) + 1e-7));
  for (float& v : x) v *= inv;
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < r; ++i)
      for (size_t j = 0; j < k; ++j) xt[j * r + i] = x[i * k + j];
    MatMul(x.data(), xt.data(), A.data(), r, k, r);  // A = X X^T
    MatMul(A.data(), A.data(), AA.data(), r, r, r);
    for (size_t i = 0; i < r * r; ++i) B[i] = b * A[i] + c * AA[i];
    MatMul(B.data(), x.data(), BX.data(), r, r, k);
    for (size_t i = 0; i < r * k; ++i) x[i] = a * x[i] + BX[i];
  }
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) m[i * cols + j] = scale * (tall ? x[j * k + i] : x[i * k + j]);
}

}  // namespace muloco::kernels::cpu
