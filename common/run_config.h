// The run configuration the server hands every worker in Join (the proto message is the one
// definition), with its defaults and validation.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

// The demo configuration: a small byte-level GPT, H = 20, 2-bit + error feedback both ways.
v1::RunConfig DefaultRunConfig();

// Rejects configurations no worker could run (zero sizes, bad codecs, lr out of range).
absl::Status ValidateRunConfig(const v1::RunConfig& config);

// One line for logs.
std::string DescribeRunConfig(const v1::RunConfig& config);

// Inner learning rate at global inner step `step` (0-based): linear warmup to inner_lr over
// warmup_steps, then cosine decay to inner_lr * inner_min_lr_ratio at total_rounds * H.
double InnerLearningRate(const v1::RunConfig& config, uint64_t step);

}  // namespace muloco
