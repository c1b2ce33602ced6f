// A flat fp32 buffer on the worker's compute device (host memory, or one GPU): the
// pseudo-gradient and the error-feedback state, which stay there from the inner steps to the
// uplink encoder. LibTorch stays in the .cc (worker/torch_device.h gives the trainer the
// tensor underneath).
#pragma once

#include <cstddef>
#include <memory>

#include "worker/device.h"

namespace muloco {

class DeviceFloats {
 public:
  DeviceFloats();                                        // empty, on the CPU
  DeviceFloats(const ComputeDevice& device, size_t n);  // n zeros
  ~DeviceFloats();
  DeviceFloats(DeviceFloats&&) noexcept;
  DeviceFloats& operator=(DeviceFloats&&) noexcept;

  float* data();  // device memory on a GPU
  const float* data() const;
  size_t size() const;
  bool on_host() const;

  void Zero();
  void CopyFrom(const DeviceFloats& other);  // same size and device
  void Upload(const float* host);             // size() floats from host memory
  void Download(float* host) const;
  void Set(size_t i, float v);
  double Norm() const;
  // Every value finite with |x| <= limit.
  bool AllWithin(float limit) const;

  struct Impl;
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace muloco
