// CPU error-feedback update (see kernels/error_feedback.h).
#include "kernels/error_feedback.h"

namespace muloco::kernels::cpu {

void EfUpdate(float* e, const float* delta, size_t n, float beta) {
  if (beta == 1.0f) {
    for (size_t i = 0; i < n; ++i) e[i] += delta[i];
  } else {
    for (size_t i = 0; i < n; ++i) e[i] = beta * e[i] + delta[i];
  }
}

}  // namespace muloco::kernels::cpu
