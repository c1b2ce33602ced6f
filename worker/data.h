// Training data: token streams with a held-out validation split, and random batch windows.
// Sources: byte-level text (a file, or a directory such as Debian's fortunes, split into
// documents on "\n%\n"; every 10th document is validation), nanoGPT-style uint16 token
// files (train.bin, with val.bin or the last 10% as validation) and muloco-prepare's shard
// directories (common/token_shards.h: train shards, a fixed val.bin, the tokenizer checked).
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

// `path`: a directory or text file (bytes), a .bin token file, or a shard directory (one
// holding val.bin); empty: kDefaultCorpus. `val_path`: optional .bin validation file for
// token data. Every token must be < vocab_size; each split must hold more than window
// tokens. `tokenizer`: the run's tokenizer checksum (0: bytes); shards must carry it and
// the run's vocab_size, and only shards may be given when it is set. INVALID_ARGUMENT /
// NOT_FOUND / FAILED_PRECONDITION with the reason otherwise.
absl::StatusOr<Corpus> LoadCorpus(const std::string& path, const std::string& val_path, uint32_t vocab_size,
                                  size_t window, uint64_t tokenizer = 0);

// Text as documents (split as above, each ending in "\n%\n"): every 10th is validation.
struct Documents {
  std::vector<std::string> train, val;
  size_t files = 0;
};
absl::StatusOr<Documents> ReadDocuments(const std::string& path);

// Fills out (batch * (window + 1) int64 tokens, row-major) with windows at random offsets.
// REQUIRES: tokens.size() > window.
void SampleWindows(const std::vector<uint16_t>& tokens, size_t batch, size_t window, std::mt19937_64& rng,
                   std::vector<int64_t>& out);

}  // namespace muloco
