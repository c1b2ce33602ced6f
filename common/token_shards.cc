// Token shards (see token_shards.h).
#include "common/token_shards.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/checksum.h"

namespace muloco {
namespace {

template <typename T>
void PutLe(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
T GetLe(std::string_view b, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::string ShardBytes(const TokenShard& shard) {
  std::string out(kShardMagic, 8);
  PutLe<uint32_t>(&out, shard.vocab_size);
  PutLe<uint32_t>(&out, 0);
  PutLe<uint64_t>(&out, shard.tokens.size());
  PutLe<uint64_t>(&out, shard.tokenizer);
  out.reserve(out.size() + 2 * shard.tokens.size());
  for (uint16_t t : shard.tokens) PutLe<uint16_t>(&out, t);
  return out;
}

absl::StatusOr<TokenShard> ParseShard(std::string_view b) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("token shard: " + m); };
  if (b.size() < kShardHeaderBytes || std::memcmp(b.data(), kShardMagic, 8) != 0) {
    return bad("no MULOCOT1 header (write shards with muloco-prepare)");
  }
  TokenShard s;
  s.vocab_size = GetLe<uint32_t>(b, 8);
  const uint64_t count = GetLe<uint64_t>(b, 16);
  s.tokenizer = GetLe<uint64_t>(b, 24);
  if (s.vocab_size < 2 || s.vocab_size > 65536) return bad(absl::StrCat("vocab_size ", s.vocab_size, " outside [2, 65536]"));
  if (count != (b.size() - kShardHeaderBytes) / 2 || (b.size() - kShardHeaderBytes) % 2 != 0) {
    return bad(absl::StrCat("the header says ", count, " tokens, the file holds ", b.size() - kShardHeaderBytes, " bytes"));
  }
  s.tokens.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    s.tokens[i] = GetLe<uint16_t>(b, kShardHeaderBytes + 2 * i);
    if (s.tokens[i] >= s.vocab_size) {
      return bad(absl::StrCat("token ", s.tokens[i], " at ", i, " is not below vocab_size ", s.vocab_size));
    }
  }
  return s;
}

uint64_t TokenizerChecksum(std::string_view model_bytes) {
  const uint64_t h = Checksum64(model_bytes.data(), model_bytes.size(), /*seed=*/0x746f6b656e);
  return h == 0 ? 1 : h;
}

}  // namespace muloco
