// The global model as a safetensors file (https://huggingface.co/docs/safetensors): an
// 8-byte little-endian header length, a JSON header naming every tensor (the names of
// common/model_layout.h, e.g. "h.0.attn.qkv.weight", dtype F32, shape, byte offsets) and
// string metadata, then the raw little-endian fp32 data in layout order. PyTorch, JAX and
// the safetensors library read it; nothing here executes on load. ParseSafetensors reads such
// a file back, a user's initial model (muloco-server --init_model) included.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_layout.h"

namespace muloco {

// REQUIRES: params holds TotalParams(layout) floats.
std::string SafetensorsBytes(const ParamLayout& layout, const float* params,
                             const std::map<std::string, std::string>& metadata);

// A safetensors file read back: its tensors in the order of their data (groups left at
// kAdamW: the run's rule assigns them), their values as fp32 (F32, F16, BF16 and F64 are
// converted), and its metadata.
struct SafetensorsModel {
  ParamLayout layout;
  std::vector<float> params;
  std::map<std::string, std::string> metadata;
};

// Checks everything and names what is wrong (INVALID_ARGUMENT): the header's length and JSON,
// each tensor's dtype, shape and byte range, ranges that tile the data with no gap or overlap,
// ValidateLayout's limits, and finite values.
absl::StatusOr<SafetensorsModel> ParseSafetensors(absl::string_view bytes);

}  // namespace muloco
