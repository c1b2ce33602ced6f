// SafetensorsBytes and ParseSafetensors (see safetensors.h).
#include "common/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json.h"

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

struct Dtype {
  const char* name;
  size_t bytes;
  float (*read)(const unsigned char* p);  // little-endian
};

float ReadF32(const unsigned char* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
float ReadF64(const unsigned char* p) {
  double v;
  std::memcpy(&v, p, 8);
  return static_cast<float>(v);
}
float ReadBF16(const unsigned char* p) {
  const uint32_t bits = (static_cast<uint32_t>(p[1]) << 24) | (static_cast<uint32_t>(p[0]) << 16);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}
float ReadF16(const unsigned char* p) {
  const uint32_t h = p[0] | (static_cast<uint32_t>(p[1]) << 8);
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);  // zero and subnormals
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

constexpr Dtype kDtypes[] = {{"F32", 4, ReadF32}, {"F64", 8, ReadF64}, {"BF16", 2, ReadBF16}, {"F16", 2, ReadF16}};

// One tensor's entry of the header.
struct Entry {
  ParamInfo info;
  const Dtype* dtype = nullptr;
  uint64_t begin = 0, end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& name, const JsonValue& v) {
  auto bad = [&](const std::string& m) { return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": ", m)); };
  if (v.type != JsonValue::Type::kObject) return bad("not an object");
  const JsonValue* dtype = v.Find("dtype");
  const JsonValue* shape = v.Find("shape");
  const JsonValue* offsets = v.Find("data_offsets");
  if (!dtype || dtype->type != JsonValue::Type::kString) return bad("no dtype");
  if (!shape || shape->type != JsonValue::Type::kArray) return bad("no shape");
  if (!offsets || offsets->type != JsonValue::Type::kArray || offsets->array.size() != 2) return bad("no data_offsets");
  Entry e;
  e.info.name = name;
  for (const Dtype& d : kDtypes) {
    if (dtype->string == d.name) e.dtype = &d;
  }
  if (!e.dtype) return bad(absl::StrCat("dtype ", dtype->string, " (muloco reads F32, F64, BF16 and F16)"));
  for (const JsonValue& d : shape->array) {
    if (d.type != JsonValue::Type::kNumber || !d.integer || d.number < 1 || d.number >= 2147483648.0) {
      return bad("a dimension is not an integer in [1, 2^31)");
    }
    e.info.shape.push_back(static_cast<int64_t>(d.number));
  }
  for (const JsonValue& o : offsets->array) {
    if (o.type != JsonValue::Type::kNumber || !o.integer || o.number < 0 || o.number > 9.0e15) return bad("bad data_offsets");
  }
  e.begin = static_cast<uint64_t>(offsets->array[0].number);
  e.end = static_cast<uint64_t>(offsets->array[1].number);
  return e;
}

// The header's tensors, checked against the data's size, in the order of their data.
absl::StatusOr<std::vector<Entry>> ParseHeader(const JsonValue& header, uint64_t data_bytes,
                                               std::map<std::string, std::string>* metadata) {
  if (header.type != JsonValue::Type::kObject) return absl::InvalidArgumentError("the header is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.object) {
    if (name == "__metadata__") {
      if (v.type != JsonValue::Type::kObject) return absl::InvalidArgumentError("__metadata__ is not an object");
      for (const auto& [k, m] : v.object) {
        if (m.type != JsonValue::Type::kString) return absl::InvalidArgumentError("__metadata__ values must be strings");
        (*metadata)[k] = m.string;
      }
      continue;
    }
    absl::StatusOr<Entry> e = ParseEntry(name, v);
    if (!e.ok()) return e.status();
    entries.push_back(*std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (Entry& e : entries) {
    uint64_t numel = 1;
    for (int64_t d : e.info.shape) numel = std::min<uint64_t>(numel * static_cast<uint64_t>(d), uint64_t{1} << 40);
    if (e.begin != at || e.end < e.begin || e.end - e.begin != numel * e.dtype->bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", e.info.name, ": data_offsets [", e.begin, ", ", e.end, ") do not hold its ", numel, " ",
          e.dtype->name, " values right after the previous tensor's (at ", at, ")"));
    }
    at = e.end;
  }
  if (at != data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the tensors hold ", at, " bytes, the file ", data_bytes));
  }
  return entries;
}

}  // namespace

absl::StatusOr<SafetensorsModel> ParseSafetensors(absl::string_view bytes) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("safetensors: " + m); };
  if (bytes.size() < 8) return bad("shorter than its 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  if (header_len > bytes.size() - 8 || header_len > (uint64_t{100} << 20)) {
    return bad(absl::StrCat("header length ", header_len, " exceeds the file (or 100 MiB)"));
  }
  absl::StatusOr<JsonValue> header = ParseJson(bytes.substr(8, header_len));
  if (!header.ok()) return bad(std::string(header.status().message()));
  const absl::string_view data = bytes.substr(8 + header_len);
  SafetensorsModel model;
  absl::StatusOr<std::vector<Entry>> entries = ParseHeader(*header, data.size(), &model.metadata);
  if (!entries.ok()) return bad(std::string(entries.status().message()));
  for (const Entry& e : *entries) model.layout.push_back(e.info);
  PlaceTensors(&model.layout);
  if (absl::Status s = ValidateLayout(model.layout); !s.ok()) return bad(std::string(s.message()));
  model.params.resize(TotalParams(model.layout));
  for (size_t t = 0; t < entries->size(); ++t) {
    const Entry& e = (*entries)[t];
    const ParamInfo& p = model.layout[t];
    const auto* src = reinterpret_cast<const unsigned char*>(data.data() + e.begin);
    for (size_t i = 0; i < p.numel; ++i) {
      const float v = e.dtype->read(src + i * e.dtype->bytes);
      if (!std::isfinite(v)) return bad(absl::StrCat("tensor ", p.name, " holds a non-finite value (as fp32)"));
      model.params[p.offset + i] = v;
    }
  }
  return model;
}

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
