// SafetensorsBytes (see safetensors.h).
#include "common/safetensors.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace muloco {
namespace {

// JSON string literal; names and metadata here are plain ASCII, but escape to be safe.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string SafetensorsBytes(const ParamLayout& layout, const float* params,
                             const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> entries, meta;
  for (const auto& [k, v] : metadata) meta.push_back(absl::StrCat(Quote(k), ":", Quote(v)));
  entries.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(meta, ","), "}"));
  for (const ParamInfo& p : layout) {
    const uint64_t begin = p.offset * sizeof(float), end = (p.offset + p.numel) * sizeof(float);
    entries.push_back(absl::StrCat(Quote(p.name), ":{\"dtype\":\"F32\",\"shape\":[", absl::StrJoin(p.shape, ","),
                                   "],\"data_offsets\":[", begin, ",", end, "]}"));
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t header_len = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header_len >> (8 * i)) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(params), TotalParams(layout) * sizeof(float));  // x86/ARM: little-endian
  return out;
}

}  // namespace muloco
