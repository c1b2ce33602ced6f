// The run configuration the server hands every worker in Join (the proto message is the one
// definition): presets, validation, and the inner learning-rate schedule.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_layout.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

// Complete configurations, one per method, kept as text-format data in run_config.cc
// (model and schedule are the demo's in each):
//   diloco       AdamW inner (constant lr after warmup), dense fp32 both ways, outer Nesterov
//                SGD lr 0.7 momentum 0.6
//   muloco       Muon inner (AdamW for embeddings, head, gains, biases; Muon lr 0.03, cosine
//                floor 0.7), dense, outer lr 0.7 / momentum 0.6
//   muloco-2bit  muloco with 2-bit Lloyd-Max both ways, error feedback on the downlink only
//                (ef_beta 0, by the frontier sweeps) (default)
//   muloco-1bit  muloco within 1 bit per parameter up and 2 down (Muon lr 0.04, outer lr 1.6 /
//                momentum 0.2)
//   signmuon     H = 1: each worker sends the signs of its Muon direction (1 bit per
//                parameter); the server applies the majority vote W <- W - outer_lr * V
inline constexpr char kDefaultPreset[] = "muloco-2bit";
std::vector<std::string> PresetNames();
absl::StatusOr<v1::RunConfig> PresetConfig(absl::string_view name);

// PresetConfig(kDefaultPreset).
v1::RunConfig DefaultRunConfig();

// A --config file: RunConfig in protobuf text format, e.g. `inner_steps: 30 model { n_layer: 4 }`.
// Merges the fields it sets into *config; INVALID_ARGUMENT with line and column otherwise.
absl::Status MergeRunConfigText(absl::string_view text, v1::RunConfig* config);
// The same format, every field written (what --print_config prints; feeds --config back).
std::string RunConfigText(const v1::RunConfig& config);
// Fields whose values differ, as "inner_steps" or "model.n_layer".
std::vector<std::string> DifferentFields(const v1::RunConfig& a, const v1::RunConfig& b);
// The command-line flag that sets a field ("total_rounds" -> "rounds", "model.n_layer" -> "n_layer").
std::string FlagForField(const std::string& field);

// Rejects configurations no worker could run (zero sizes, bad codecs, lr out of range,
// a signmuon run without a sign uplink).
absl::Status ValidateRunConfig(const v1::RunConfig& config);

// The configuration's string choices, parsed once into typed values.
enum class RunMode { kDiloco, kSignMuon };
enum class InnerOptimizer { kAdamW, kMuon };  // kMuon: Muon for hidden matrices, AdamW for the rest
enum class MuonScale {
  kShape,       // sqrt(max(1, rows / cols)) (Keller Jordan)
  kMatchAdamW,  // 0.2 * sqrt(max(rows, cols)): update RMS like AdamW's (Moonlight)
};
// The scale Muon applies to a rows x cols update under `rule` (worker/muon.h, and the
// Python package's Muon).
double MuonShapeScale(int64_t rows, int64_t cols, MuonScale rule);

struct RunKinds {
  RunMode mode = RunMode::kDiloco;
  InnerOptimizer inner = InnerOptimizer::kAdamW;
  MuonScale muon_scale = MuonScale::kShape;
  bool async = false;  // sync: async
};
// INVALID_ARGUMENT naming the field for an unknown choice.
absl::StatusOr<RunKinds> ParseKinds(const v1::RunConfig& config);
// REQUIRES: ValidateRunConfig(config).ok().
RunKinds KindsOf(const v1::RunConfig& config);

// One line for logs.
std::string DescribeRunConfig(const v1::RunConfig& config);

// The decoupled weight decay the inner optimizers give a tensor of this kind: muon_weight_decay
// for the matrices Muon trains, weight_decay for AdamW's other tensors, 0 for gains and biases.
float WeightDecayFor(const v1::RunConfig& config, ParamGroup group);

// Inner learning-rate multiplier at global inner step `step` (0-based) in [0, 1]: linear
// warmup over warmup_steps, then cosine decay to inner_min_lr_ratio at total_rounds * H.
double LearningRateFactor(const v1::RunConfig& config, uint64_t step);
// inner_lr * LearningRateFactor.
double InnerLearningRate(const v1::RunConfig& config, uint64_t step);

}  // namespace muloco
