// Text from a trained model: a muloco export (muloco-server --export, safetensors) rebuilt as
// the built-in architecture its metadata names, continuing a prompt of token ids by sampling
// (muloco-worker --generate; scripts/sample.sh turns text into ids and back).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

struct GenerateOptions {
  size_t tokens = 200;       // new tokens to sample
  double temperature = 0.8;  // 0: the most likely token each time
  uint64_t seed = 1;
  uint64_t tokenizer_checksum = 0;  // of the tokenizer the prompt's ids come from (0: bytes); must be the export's
};

// The model spec an export's metadata states (format muloco-gpt or muloco-llama).
absl::StatusOr<v1::ModelSpec> SpecFromExport(const std::map<std::string, std::string>& meta);

// The prompt followed by the sampled tokens. The prompt must be non-empty, its ids below the
// model's vocabulary; the model sees at most its context of the latest tokens.
absl::StatusOr<std::vector<int64_t>> Generate(const std::string& model_path, const std::vector<int64_t>& prompt,
                                              const GenerateOptions& o);

}  // namespace muloco
