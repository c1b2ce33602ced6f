// Token shards (see token_shards.h).
#include "common/token_shards.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/checksum.h"

namespace muloco {
namespace {

// Host order is little-endian on every supported host (as codec/checksum.h assumes), so the
// header's fields and the tokens are copied as they are.
template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T Get(std::string_view b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

}  // namespace

std::string ShardBytes(const TokenShard& shard) {
  std::string out(kShardMagic, 8);
  Put<uint32_t>(&out, shard.vocab_size);
  Put<uint32_t>(&out, 0);
  Put<uint64_t>(&out, shard.tokens.size());
  Put<uint64_t>(&out, shard.tokenizer);
  out.append(reinterpret_cast<const char*>(shard.tokens.data()), 2 * shard.tokens.size());
  return out;
}

absl::StatusOr<TokenShard> ParseShard(std::string_view b) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("token shard: " + m); };
  if (b.size() < kShardHeaderBytes || std::memcmp(b.data(), kShardMagic, 8) != 0) {
    return bad("no MULOCOT1 header (write shards with muloco-prepare)");
  }
  TokenShard s;
  s.vocab_size = Get<uint32_t>(b, 8);
  const uint64_t count = Get<uint64_t>(b, 16);
  s.tokenizer = Get<uint64_t>(b, 24);
  if (s.vocab_size < 2 || s.vocab_size > 65536) return bad(absl::StrCat("vocab_size ", s.vocab_size, " outside [2, 65536]"));
  if (count != (b.size() - kShardHeaderBytes) / 2 || (b.size() - kShardHeaderBytes) % 2 != 0) {
    return bad(absl::StrCat("the header says ", count, " tokens, the file holds ", b.size() - kShardHeaderBytes, " bytes"));
  }
  s.tokens.resize(count);
  std::memcpy(s.tokens.data(), b.data() + kShardHeaderBytes, 2 * count);
  for (uint64_t i = 0; i < count; ++i) {
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
