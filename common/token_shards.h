// Token shards: what muloco-prepare writes (worker/prepare_main.cc) and a worker's --data=DIR
// reads. A shard is a 32-byte header, then the tokens as uint16 little-endian:
//   bytes 0-7    magic "MULOCOT1"
//   bytes 8-11   vocab_size (uint32 LE): every token is below it
//   bytes 12-15  0 (reserved)
//   bytes 16-23  token count (uint64 LE)
//   bytes 24-31  tokenizer checksum (uint64 LE): TokenizerChecksum of the tokenizer's model
//                file, the same value the run states with --tokenizer_checksum
// A shard directory holds tokenizer.model, val.bin (the fixed validation split) and one or
// more train-NNNNN.bin.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace muloco {

inline constexpr char kShardMagic[] = "MULOCOT1";
inline constexpr size_t kShardHeaderBytes = 32;

struct TokenShard {
  uint32_t vocab_size = 0;
  uint64_t tokenizer = 0;  // the tokenizer's checksum
  std::vector<uint16_t> tokens;
};

std::string ShardBytes(const TokenShard& shard);
// Checks the magic, the size against the count, and every token against the vocabulary;
// INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<TokenShard> ParseShard(std::string_view bytes);

// xxh64 of a tokenizer model file's bytes; never 0 (0 means "no tokenizer": bytes).
uint64_t TokenizerChecksum(std::string_view model_bytes);

}  // namespace muloco
