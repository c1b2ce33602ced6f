// Parameter layout of the decoder-only GPT: every named tensor's shape and its offset in one
// flat fp32 buffer. The server (no LibTorch) and the worker derive the same layout from a
// ModelSpec, so a flat buffer is all that ever crosses the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codec/codec.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

// What a tensor is for; decides its optimizer group and initialisation.
enum class ParamKind {
  kEmbedding,  // token and position embeddings
  kMatrix,     // 2-D hidden matrices (attention, MLP)
  kHead,       // LM head
  kGain,       // LayerNorm weights
  kBias,       // LayerNorm biases
};

// Muon's share of the model: the 2-D hidden matrices. Embeddings, the LM head, gains and
// biases stay with AdamW.
inline bool UsesMuon(ParamKind kind) { return kind == ParamKind::kMatrix; }
// Whether the inner optimizers apply decoupled weight decay to it (not to gains and biases).
inline bool Decays(ParamKind kind) { return kind != ParamKind::kGain && kind != ParamKind::kBias; }

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  ParamKind kind;
  size_t offset = 0;  // index of the first element in the flat buffer
  size_t numel = 0;
};

using ParamLayout = std::vector<ParamInfo>;

// Checks the spec's ranges (non-zero sizes, d_model divisible by n_head, sane limits).
absl::Status ValidateModelSpec(const v1::ModelSpec& spec);

// REQUIRES: ValidateModelSpec(spec).ok().
ParamLayout GptLayout(const v1::ModelSpec& spec);

size_t TotalParams(const ParamLayout& layout);

// The tensors' shapes as the codec sees them (rows, element count, 1-D or not).
std::vector<TensorShape> CodecShapes(const ParamLayout& layout);

// GPT-2 style initialisation: N(0, 0.02) for weights, residual projections scaled by
// 1/sqrt(2 n_layer), gains 1, biases 0. Deterministic in spec.init_seed.
std::vector<float> InitParams(const v1::ModelSpec& spec, const ParamLayout& layout);

}  // namespace muloco
