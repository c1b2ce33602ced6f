// DeviceFloats over a LibTorch tensor (see device_floats.h).
#include "worker/device_floats.h"

#include <cmath>

#include "worker/torch_device.h"

namespace muloco {

struct DeviceFloats::Impl {
  torch::Tensor t;  // 1-D, fp32, contiguous
};

torch::Tensor& TensorOf(DeviceFloats& f) { return f.impl().t; }
const torch::Tensor& TensorOf(const DeviceFloats& f) { return f.impl().t; }

namespace {
torch::Tensor HostView(const float* host, size_t n) {
  return torch::from_blob(const_cast<float*>(host), {static_cast<int64_t>(n)}, torch::kFloat32);
}
}  // namespace

DeviceFloats::DeviceFloats() : DeviceFloats(ComputeDevice{}, 0) {}
DeviceFloats::DeviceFloats(const ComputeDevice& device, size_t n) : impl_(std::make_unique<Impl>()) {
  impl_->t = torch::zeros({static_cast<int64_t>(n)}, torch::TensorOptions(torch::kFloat32).device(TorchDevice(device)));
}
DeviceFloats::~DeviceFloats() = default;
DeviceFloats::DeviceFloats(DeviceFloats&&) noexcept = default;
DeviceFloats& DeviceFloats::operator=(DeviceFloats&&) noexcept = default;

float* DeviceFloats::data() { return impl_->t.data_ptr<float>(); }
const float* DeviceFloats::data() const { return impl_->t.data_ptr<float>(); }
size_t DeviceFloats::size() const { return static_cast<size_t>(impl_->t.numel()); }
bool DeviceFloats::on_host() const { return impl_->t.device().is_cpu(); }

void DeviceFloats::Zero() { impl_->t.zero_(); }
void DeviceFloats::CopyFrom(const DeviceFloats& other) { impl_->t.copy_(other.impl_->t); }
void DeviceFloats::Upload(const float* host) { impl_->t.copy_(HostView(host, size())); }
void DeviceFloats::Download(float* host) const { HostView(host, size()).copy_(impl_->t); }
void DeviceFloats::Set(size_t i, float v) { impl_->t[static_cast<int64_t>(i)].fill_(v); }

double DeviceFloats::Norm() const {
  if (size() == 0) return 0.0;
  if (on_host()) {  // in double, element by element, as the metric always was
    const float* p = data();
    double s = 0;
    for (size_t i = 0; i < size(); ++i) s += static_cast<double>(p[i]) * p[i];
    return std::sqrt(s);
  }
  return impl_->t.norm().item<double>();
}

bool DeviceFloats::AllWithin(float limit) const {
  if (size() == 0) return true;
  // NaN fails the comparison, so it counts as outside.
  return impl_->t.abs().le(limit).all().item<bool>();
}

}  // namespace muloco
