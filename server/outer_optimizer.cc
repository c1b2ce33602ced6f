// OuterSgd::Step, written to match torch.optim.SGD's arithmetic (dampening 0, no decay), and
// its delayed form.
#include "server/outer_optimizer.h"

#include <algorithm>

namespace muloco {

void OuterSgd::Step(float* params, const float* grad, size_t n) {
  const float lr = options_.lr, mu = options_.momentum;
  if (mu == 0.0f) {
    for (size_t i = 0; i < n; ++i) params[i] -= lr * grad[i];
    return;
  }
  if (Delayed()) {
    const uint32_t every = options_.momentum_every;
    float* sum = delayed_.data();
    for (size_t i = 0; i < n; ++i) {
      sum[i] += grad[i];
      params[i] -= lr * grad[i] / static_cast<float>(every);
    }
    if (++delayed_steps_ < every) return;
    // The momentum step on the mean ḡ, less the lr·ḡ already applied: nesterov μ·buf, else buf − ḡ.
    float* buf = buf_.data();
    for (size_t i = 0; i < n; ++i) {
      const float mean = sum[i] / static_cast<float>(every);
      buf[i] = mu * buf[i] + mean;
      params[i] -= lr * (options_.nesterov ? mu * buf[i] : buf[i] - mean);
      sum[i] = 0.0f;
    }
    delayed_steps_ = 0;
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

bool OuterSgd::set_delayed(std::vector<float> sum, uint32_t steps) {
  if (sum.size() != delayed_.size() || steps >= std::max<uint32_t>(1, options_.momentum_every)) return false;
  delayed_ = std::move(sum);
  delayed_steps_ = steps;
  return true;
}

}  // namespace muloco
