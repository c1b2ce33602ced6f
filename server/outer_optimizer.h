// Outer optimizer of DiLoCo: SGD with (Nesterov) momentum on the averaged pseudo-gradient,
// the same update as torch.optim.SGD(lr, momentum, nesterov). lr 1, momentum 0 is plain
// averaging: θ ← θ − mean(Δ) = mean(θ_k). With momentum_every = N > 1, Delayed Nesterov (Liu
// et al., arXiv 2401.09135, for asynchronous rounds, whose stale updates would each feed the
// momentum): every step applies lr·g/N, and every N-th step also moves the momentum by the
// mean of the N steps' gradients and applies the rest of the momentum step on that mean, so
// that N steps move θ exactly as one torch SGD step on their mean gradient.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace muloco {

struct OuterSgdOptions {
  float lr = 0.7f;        // outer learning rate
  float momentum = 0.9f;  // 0 disables the momentum buffer
  bool nesterov = true;   // look-ahead step g + momentum * buf
  uint32_t momentum_every = 1;  // Delayed Nesterov's N (1: the momentum moves every step)
};

class OuterSgd {
 public:
  OuterSgd(OuterSgdOptions options, size_t n)
      : options_(options), buf_(options.momentum != 0 ? n : 0, 0.0f), delayed_(Delayed() ? n : 0, 0.0f) {}

  // params -= lr * direction(grad), updating the momentum buffer. REQUIRES: n == size.
  void Step(float* params, const float* grad, size_t n);

  const std::vector<float>& momentum_buffer() const { return buf_; }
  // Restores a saved buffer (from a checkpoint). REQUIRES: same size as this one's.
  void set_momentum_buffer(std::vector<float> buf) { buf_ = std::move(buf); }
  // Delayed Nesterov: the sum of the gradients since the momentum last moved, and how many.
  const std::vector<float>& delayed_sum() const { return delayed_; }
  uint32_t delayed_steps() const { return delayed_steps_; }
  // Restores them (from a checkpoint); false (nothing changed) when they do not fit this optimizer.
  bool set_delayed(std::vector<float> sum, uint32_t steps);

 private:
  bool Delayed() const { return options_.momentum != 0 && options_.momentum_every > 1; }

  OuterSgdOptions options_;
  std::vector<float> buf_;
  std::vector<float> delayed_;
  uint32_t delayed_steps_ = 0;
};

}  // namespace muloco
