// The global model as a safetensors file (https://huggingface.co/docs/safetensors): an
// 8-byte little-endian header length, a JSON header naming every tensor (the names of
// common/model_layout.h, e.g. "h.0.attn.qkv.weight", dtype F32, shape, byte offsets) and
// string metadata, then the raw little-endian fp32 data in layout order. PyTorch, JAX and
// the safetensors library read it; nothing here executes on load.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/model_layout.h"

namespace muloco {

// REQUIRES: params holds TotalParams(layout) floats.
std::string SafetensorsBytes(const ParamLayout& layout, const float* params,
                             const std::map<std::string, std::string>& metadata);

}  // namespace muloco
