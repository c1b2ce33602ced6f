// Training data: token streams with a held-out validation split, and random batch windows.
// Sources: byte-level text (a file, or a directory such as Debian's fortunes, split into
// documents on "\n%\n"; every 10th document is validation) and nanoGPT-style uint16 token
// files (train.bin, with val.bin or the last 10% as validation).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace muloco {

inline constexpr char kDefaultCorpus[] = "/usr/share/games/fortunes";

struct Corpus {
  std::vector<uint16_t> train;
  std::vector<uint16_t> val;
  std::string description;  // for logs: source, sizes
};

// `path`: a directory or text file (bytes), or a .bin token file; empty: kDefaultCorpus. `val_path`: optional .bin
// validation file for token data. Every token must be < vocab_size; each split must hold
// more than window tokens. INVALID_ARGUMENT / NOT_FOUND with the reason otherwise.
absl::StatusOr<Corpus> LoadCorpus(const std::string& path, const std::string& val_path, uint32_t vocab_size,
                                  size_t window);

// Fills out (batch * (window + 1) int64 tokens, row-major) with windows at random offsets.
// REQUIRES: tokens.size() > window.
void SampleWindows(const std::vector<uint16_t>& tokens, size_t batch, size_t window, std::mt19937_64& rng,
                   std::vector<int64_t>& out);

}  // namespace muloco
