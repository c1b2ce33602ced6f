// The worker's compute device: the CPU (the default build's only choice, and the reference)
// or one CUDA GPU, where the model, the inner optimizers, the pseudo-gradient, the
// error-feedback state and the uplink encoder live; the public model and the downlink decode
// stay on the host, beside the checksum. --dtype=bf16 autocasts forward and backward to
// bf16 on a GPU (fp32 master weights).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace muloco {

struct ComputeDevice {
  bool cuda = false;
  int index = 0;       // CUDA device ordinal
  bool bf16 = false;   // autocast forward/backward to bf16 (CUDA only)
  std::string Name() const;  // "cpu", "cuda:0", "cuda:0 bf16"
};

// device: "cpu", "cuda", "cuda:N" or "auto" (CUDA when LibTorch and the codec can both use
// a GPU, else the CPU, saying why in *note); dtype: "fp32" or "bf16". INVALID_ARGUMENT for
// a bad spelling or bf16 without CUDA; FAILED_PRECONDITION for CUDA where none is usable.
absl::StatusOr<ComputeDevice> ResolveDevice(const std::string& device, const std::string& dtype, std::string* note);

// Why CUDA cannot be used here ("" when it can), device `index`.
std::string CudaUnusable(int index);

}  // namespace muloco
