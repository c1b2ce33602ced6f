// Newton–Schulz polar step for the server's SignMuon vote (the server has no LibTorch):
// plain fp32 loops, fine for the small matrices of tests and demos; O(rows * cols * min) per
// iteration, so large models want the worker-side (LibTorch) version.
#pragma once

#include <cstddef>

namespace muloco {

// m (rows x cols, row-major) <- sqrt(max(rows, cols)) * NS_steps(m / ||m||_F), with the
// quintic coefficients (3.4445, -4.7750, 2.0315). The scale gives the result an RMS of about
// 1, like the sign vote it replaces. A zero matrix stays zero.
void PolarNewtonSchulz(float* m, size_t rows, size_t cols, int steps);

}  // namespace muloco
