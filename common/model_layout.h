// The model's layout as data: every named tensor's shape, its optimizer group and its offset
// in one flat fp32 buffer, so a flat buffer is all that ever crosses the wire. A run's layout
// is a built-in architecture's (BuiltinLayout: the GPT or LLaMA, derived from a ModelSpec by
// the server, which has no LibTorch, and by the worker alike) or a user's model's (read from a safetensors file,
// common/safetensors.h); the server sends it in Join and refuses a worker whose model differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

// How the inner optimizers treat a tensor.
enum class ParamGroup {
  kMuon,          // hidden 2-D matrices: Muon (AdamW when the run's inner optimizer is adamw), decayed
  kAdamW,         // embeddings, LM heads, tensors of other ranks: AdamW, decayed
  kAdamWNoDecay,  // gains and biases (1-D) and scalars: AdamW without weight decay
};

inline bool UsesMuon(ParamGroup g) { return g == ParamGroup::kMuon; }
// Whether the inner optimizers apply decoupled weight decay to it (not to gains and biases).
inline bool Decays(ParamGroup g) { return g != ParamGroup::kAdamWNoDecay; }

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;  // empty: a scalar
  ParamGroup group = ParamGroup::kAdamW;
  size_t offset = 0;  // index of the first element in the flat buffer
  size_t numel = 0;
};

using ParamLayout = std::vector<ParamInfo>;

// Checks the spec's ranges (non-zero sizes, d_model divisible by n_head, sane limits).
absl::Status ValidateModelSpec(const v1::ModelSpec& spec);

// The built-in architecture's layout: GptLayout or LlamaLayout by spec.arch.
// REQUIRES: ValidateModelSpec(spec).ok(). Groups by the default rule.
ParamLayout BuiltinLayout(const v1::ModelSpec& spec);
// GPT-2 style: wte, wpe, h.N.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}, ln_f, lm_head.
ParamLayout GptLayout(const v1::ModelSpec& spec);
// Hugging Face LLaMA names: model.embed_tokens, model.layers.N.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm,
// lm_head (absent when tied); no biases.
ParamLayout LlamaLayout(const v1::ModelSpec& spec);
bool IsLlama(const v1::ModelSpec& spec);
inline constexpr double kLlamaRmsEps = 1e-5;        // RMSNorm's epsilon (worker/llama.h)
inline constexpr double kLlamaRopeBase = 10000.0;   // rotary embeddings' base (theta)
uint32_t KvHeads(const v1::ModelSpec& spec);  // n_kv_head, or n_head when 0
uint32_t FfnDim(const v1::ModelSpec& spec);   // ffn_dim, or 8/3 d_model rounded up to a multiple of 8

size_t TotalParams(const ParamLayout& layout);

// Which tensors Muon takes: every 2-D tensor whose name does not match `adamw_params` (an
// ECMAScript regular expression searched in the name); other tensors of 2 or more
// dimensions go to AdamW, 1-D tensors and scalars to AdamW without decay. The default names
// the embeddings and LM heads of the common transformer conventions: GPT-2 / nanoGPT (wte,
// wpe, lm_head), Hugging Face LLaMA (embed_tokens, lm_head), Meta LLaMA (tok_embeddings,
// output).
inline constexpr char kDefaultAdamwParams[] =
    "(^|\\.)(wte|wpe|lm_head|embed_tokens|tok_embeddings|embeddings?|output|head)(\\.|$)";
// Sets every tensor's group by the rule; INVALID_ARGUMENT when the expression does not parse.
absl::Status AssignGroups(const std::string& adamw_params, ParamLayout* layout);

// Sets offsets (tensors back to back, in order) and element counts from the shapes.
void PlaceTensors(ParamLayout* layout);

// Checks a layout that a file or a peer supplied: at least one tensor, names non-empty,
// unique, at most 256 printable ASCII characters, dimensions in [1, 2^31), at most 2^36
// parameters in all. REQUIRES: PlaceTensors done.
absl::Status ValidateLayout(const ParamLayout& layout);

// The first way `have` differs from `want` by names and shapes, in `want`'s order
// ("tensor h.0.mlp.fc.weight: shape [256, 64] here, [128, 64] in the run"); "" when they
// hold the same tensors. Groups and order are not compared.
std::string LayoutDifference(const ParamLayout& want, const ParamLayout& have);

// The layout on the wire (v1::ModelLayout) and back (validated).
v1::ModelLayout LayoutProto(const ParamLayout& layout);
absl::StatusOr<ParamLayout> LayoutFromProto(const v1::ModelLayout& proto);

// The tensors' shapes as the codec sees them (rows, element count, 1-D or not).
std::vector<TensorShape> CodecShapes(const ParamLayout& layout);

// GPT-2 style initialisation: N(0, 0.02) for weights, residual projections (GPT's
// *.proj, LLaMA's o_proj and down_proj) scaled by 1/sqrt(2 n_layer), gains 1, biases 0. Deterministic in spec.init_seed.
std::vector<float> InitParams(const v1::ModelSpec& spec, const ParamLayout& layout);

}  // namespace muloco
