// LibTorch's side of the worker's compute device: the torch::Device of a ComputeDevice and
// the tensor under a DeviceFloats. Only for .cc files that already use LibTorch.
#pragma once

#include <torch/torch.h>

#include "worker/device.h"

namespace muloco {

inline torch::Device TorchDevice(const ComputeDevice& d) {
  return d.cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index)) : torch::Device(torch::kCPU);
}

class DeviceFloats;  // worker/device_floats.h
// The tensor under a DeviceFloats: 1-D, fp32, contiguous (defined in device_floats.cc).
torch::Tensor& TensorOf(DeviceFloats& f);
const torch::Tensor& TensorOf(const DeviceFloats& f);

}  // namespace muloco
