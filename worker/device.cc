// Picking the worker's compute device (see device.h).
#include "worker/device.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "codec/codec_backend.h"

namespace muloco {

std::string ComputeDevice::Name() const {
  if (!cuda) return "cpu";
  return absl::StrCat("cuda:", index, bf16 ? " bf16" : "");
}

std::string CudaUnusable(int index) {
  if (!torch::cuda::is_available()) return "this LibTorch has no CUDA or sees no GPU";
  const int torch_devices = static_cast<int>(torch::cuda::device_count());
  if (index >= torch_devices) return absl::StrCat("LibTorch sees ", torch_devices, " GPUs, no cuda:", index);
  // The device answers: a small tensor there, and the codec's stream (which says why not, e.g.
  // a build without nvcc, or a driver older than the toolkit).
  try {
    const torch::Device d(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
    if (torch::ones({8}, torch::TensorOptions(torch::kFloat32).device(d)).sum().item<float>() != 8.0f) {
      return absl::StrCat("cuda:", index, " computed a wrong sum");
    }
  } catch (const std::exception& e) {
    return absl::StrCat("cuda:", index, " failed a test computation: ", e.what());
  }
  if (absl::StatusOr<std::unique_ptr<CodecBackend>> b = MakeCudaBackend(index); !b.ok()) {
    return std::string(b.status().message());
  }
  return "";
}

absl::StatusOr<ComputeDevice> ResolveDevice(const std::string& device, const std::string& dtype, std::string* note) {
  ComputeDevice d;
  if (dtype != "fp32" && dtype != "bf16") return absl::InvalidArgumentError("--dtype must be fp32 or bf16, not '" + dtype + "'");
  if (device == "auto") {
    const std::string why = CudaUnusable(0);
    d.cuda = why.empty();
    if (!d.cuda && note) *note = "--device=auto: training on the CPU (" + why + ")";
  } else if (device == "cuda" || absl::StartsWith(device, "cuda:")) {
    if (device != "cuda" && (!absl::SimpleAtoi(device.substr(5), &d.index) || d.index < 0)) {
      return absl::InvalidArgumentError("--device: '" + device + "' is not cuda:N");
    }
    if (const std::string why = CudaUnusable(d.index); !why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("--device=", device, ": ", why, "; use --device=cpu or auto"));
    }
    d.cuda = true;
  } else if (device != "cpu") {
    return absl::InvalidArgumentError("--device must be cpu, cuda, cuda:N or auto, not '" + device + "'");
  }
  if (dtype == "bf16") {
    if (!d.cuda) return absl::InvalidArgumentError("--dtype=bf16 needs a CUDA device (the CPU trains in fp32)");
    d.bf16 = true;
  }
  return d;
}

}  // namespace muloco
