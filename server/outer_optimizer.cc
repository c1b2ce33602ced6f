// OuterSgd::Step, written to match torch.optim.SGD's arithmetic (dampening 0, no decay).
#include "server/outer_optimizer.h"

namespace muloco {

void OuterSgd::Step(float* params, const float* grad, size_t n) {
  const float lr = options_.lr, mu = options_.momentum;
  if (mu == 0.0f) {
    for (size_t i = 0; i < n; ++i) params[i] -= lr * grad[i];
    return;
  }
  // torch: buf = mu*buf + g (first step buf = g, identical since buf starts at 0);
  // nesterov: d = g + mu*buf; else d = buf; p -= lr*d.
  float* buf = buf_.data();
  for (size_t i = 0; i < n; ++i) {
    buf[i] = mu * buf[i] + grad[i];
    const float d = options_.nesterov ? grad[i] + mu * buf[i] : buf[i];
    params[i] -= lr * d;
  }
}

}  // namespace muloco
