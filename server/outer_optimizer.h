// Outer optimizer of DiLoCo: SGD with (Nesterov) momentum on the averaged pseudo-gradient,
// the same update as torch.optim.SGD(lr, momentum, nesterov). lr 1, momentum 0 is plain
// averaging: θ ← θ − mean(Δ) = mean(θ_k).
#pragma once

#include <cstddef>
#include <vector>

namespace muloco {

struct OuterSgdOptions {
  float lr = 0.7f;        // outer learning rate
  float momentum = 0.9f;  // 0 disables the momentum buffer
  bool nesterov = true;   // look-ahead step g + momentum * buf
};

class OuterSgd {
 public:
  OuterSgd(OuterSgdOptions options, size_t n) : options_(options), buf_(options.momentum != 0 ? n : 0, 0.0f) {}

  // params -= lr * direction(grad), updating the momentum buffer. REQUIRES: n == size.
  void Step(float* params, const float* grad, size_t n);

  const std::vector<float>& momentum_buffer() const { return buf_; }
  // Restores a saved buffer (from a checkpoint). REQUIRES: same size as this one's.
  void set_momentum_buffer(std::vector<float> buf) { buf_ = std::move(buf); }

 private:
  OuterSgdOptions options_;
  std::vector<float> buf_;
};

}  // namespace muloco
