// LibTorch's side of the worker's compute device: the torch::Device of a ComputeDevice and
// the tensor under a DeviceFloats. Only for .cc files that already use LibTorch.
#pragma once

#include <torch/torch.h>

#include "worker/device.h"
#include "worker/device_floats.h"

namespace muloco {

inline torch::Device TorchDevice(const ComputeDevice& d) {
  return d.cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index)) : torch::Device(torch::kCPU);
}

struct DeviceFloats::Impl {
  torch::Tensor t;  // 1-D, fp32, contiguous
};

inline torch::Tensor& TensorOf(DeviceFloats& f) { return f.impl().t; }
inline const torch::Tensor& TensorOf(const DeviceFloats& f) { return f.impl().t; }

}  // namespace muloco
