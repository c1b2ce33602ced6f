// Every run-config field, declared once: its command-line flag, the flag's type, its path in
// RunConfig (proto/muloco/v1/muloco.proto), its base value (what every preset starts from,
// before the preset's own fields; common/run_config.cc) and its help text. The flags
// (run_config_flags.cc), their defaults, the flag a field is set by, and the base
// configuration all come from this table. Adding a field: the proto field, one row here, and
// its bounds in ValidateRunConfig if it has any (run_config_test checks the table covers
// every proto field).
#pragma once

#include <cstdint>
#include <string>

#include "muloco/v1/muloco.pb.h"

// X(type, flag, "path", base, "help")
#define MULOCO_RUN_CONFIG_FIELDS(X)                                                                                   \
  X(std::string, mode, "mode", "diloco", "diloco (mean + outer SGD) or signmuon (majority vote)")                    \
  X(std::string, sync, "sync", "sync",                                                                               \
    "sync (a round waits for its expected workers) or async (no barrier: a round closes at the quorum and a grace "   \
    "window, pushes from older versions weigh less; diloco only)")                                                   \
  X(uint32_t, vocab_size, "model.vocab_size", 256, "Model: vocabulary size (256 for bytes)")                         \
  X(uint32_t, n_layer, "model.n_layer", 2, "Model: transformer layers")                                              \
  X(uint32_t, n_head, "model.n_head", 4, "Model: attention heads")                                                   \
  X(uint32_t, d_model, "model.d_model", 64, "Model: embedding width")                                                \
  X(uint32_t, context, "model.context", 64, "Model: context length in tokens")                                       \
  X(uint64_t, init_seed, "model.init_seed", 1234, "Model: initialisation seed")                                      \
  X(std::string, arch, "model.arch", "gpt",                                                                          \
    "Model: gpt (GPT-2 style) or llama (RMSNorm, rotary positions, SwiGLU; Hugging Face names)")                     \
  X(uint32_t, n_kv_head, "model.n_kv_head", 0, "Model (llama): key/value heads, grouped-query attention (0: n_head)") \
  X(uint32_t, ffn_dim, "model.ffn_dim", 0, "Model (llama): SwiGLU hidden width (0: 8/3 d_model, multiple of 8)")     \
  X(bool, tie_embeddings, "model.tie_embeddings", false, "Model (llama): the LM head is the token embedding")       \
  X(uint64_t, tokenizer_checksum, "model.tokenizer_checksum", 0,                                                     \
    "Model: the tokenizer of the workers' token shards, as muloco-prepare prints it (0: the corpus is bytes)")      \
  X(uint32_t, inner_steps, "inner_steps", 20, "H: inner optimizer steps per round")                                  \
  X(uint32_t, rounds, "total_rounds", 10, "Outer rounds in the run")                                                 \
  X(uint32_t, batch_size, "batch_size", 16, "Sequences per inner step (per worker)")                                 \
  X(std::string, inner_optimizer, "inner_optimizer", "adamw",                                                        \
    "adamw, or muon (Muon for hidden matrices, AdamW for the rest)")                                                 \
  X(float, inner_lr, "inner_lr", 3e-3f, "Inner AdamW peak learning rate")                                            \
  X(float, inner_min_lr_ratio, "inner_min_lr_ratio", 0.1f, "Cosine schedule floor, as a fraction of the peak")      \
  X(uint32_t, warmup_steps, "warmup_steps", 20, "Linear warmup steps of the inner schedule")                         \
  X(float, weight_decay, "weight_decay", 0.1f,                                                                       \
    "Decoupled weight decay of AdamW's tensors (embeddings, head; not gains, biases)")                              \
  X(float, muon_weight_decay, "muon_weight_decay", 0.0f,                                                             \
    "Decoupled weight decay of the Muon matrices (W *= 1 - muon_lr * wd per step)")                                  \
  X(float, beta1, "beta1", 0.9f, "Inner AdamW beta1")                                                                \
  X(float, beta2, "beta2", 0.95f, "Inner AdamW beta2")                                                               \
  X(float, adam_eps, "adam_eps", 1e-8f, "Inner AdamW epsilon")                                                       \
  X(float, grad_clip, "grad_clip", 1.0f, "Gradient clipping max norm (0: off)")                                      \
  X(float, muon_lr, "muon_lr", 0.02f, "Muon peak learning rate (same schedule as inner_lr)")                         \
  X(float, muon_momentum, "muon_momentum", 0.95f, "Muon momentum (EMA beta, Nesterov look-ahead)")                  \
  X(std::string, muon_scale, "muon_scale", "shape",                                                                  \
    "Muon update scale: shape (sqrt(max(1,rows/cols))) or adamw (0.2 sqrt(max(rows,cols)))")                         \
  X(uint32_t, ns_steps, "ns_steps", 5, "Newton-Schulz iterations")                                                   \
  X(std::string, uplink_codec, "uplink_codec", "dense-fp32",                                                         \
    "Worker->server codec: dense-fp32, dense-bf16, lloyd:bits=2,chunk=4096[,keep=0.9], quant:bits=2,chunk=4096, "    \
    "linear:bits=2,chunk=256, topk:chunk=4096,k=32,bits=2, sign:chunk=4096 (see codec/codec.h)")                     \
  X(std::string, downlink_codec, "downlink_codec", "dense-fp32", "Server->worker codec (same choices)")              \
  X(float, ef_beta, "ef_beta", 1.0f, "Worker error-feedback decay: e <- ef_beta * e + delta")                       \
  X(float, outer_lr, "outer_lr", 0.7f, "Outer learning rate (diloco: SGD; signmuon: the vote's step)")              \
  X(float, outer_momentum, "outer_momentum", 0.6f, "Outer SGD momentum (lr 1, momentum 0: plain averaging)")         \
  X(bool, nesterov, "outer_nesterov", true, "Use Nesterov momentum in the outer step")                               \
  X(bool, signmuon_polar, "signmuon_polar", false, "signmuon: Newton-Schulz polar step on each matrix's vote")       \
  X(uint64_t, data_seed, "data_seed", 1, "Base data seed; each worker adds its join index (0 for the first to join)") \
  X(uint32_t, eval_every, "eval_every", 1, "Rounds between validation evaluations (0: never)")                      \
  X(uint32_t, eval_batches, "eval_batches", 8, "Validation batches per evaluation")

namespace muloco {

// The field at `path` ("inner_steps", "model.n_layer") of `config`, read or written through
// the proto's reflection. T is the table's type: uint32_t, uint64_t, float, bool or
// std::string; a path or type that does not match the proto is a bug (run_config_test).
template <typename T>
T RunConfigField(const v1::RunConfig& config, const char* path);
template <typename T>
void SetRunConfigField(v1::RunConfig* config, const char* path, const T& value);

// Whether `path` names a scalar field of RunConfig whose type is T's.
template <typename T>
bool RunConfigFieldHasType(const char* path);

}  // namespace muloco
