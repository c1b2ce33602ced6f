// ParseJson (see json.h): recursive descent over the text, one character of look-ahead.
#include "common/json.h"

#include <cmath>
#include <cstdlib>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace muloco {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<JsonValue> Document() {
    JsonValue v;
    if (absl::Status st = Value(&v, 0); !st.ok()) return st;
    SkipSpace();
    if (i_ != s_.size()) return Error("text after the value");
    return v;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", what, " at byte ", i_));
  }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool Literal(absl::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  absl::Status Value(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return Error("nesting deeper than 64");
    SkipSpace();
    if (i_ >= s_.size()) return Error("unexpected end");
    const char c = s_[i_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v->type = JsonValue::Type::kString;
      return String(&v->string);
    }
    if (Literal("true") || Literal("false")) {
      v->type = JsonValue::Type::kBool;
      v->boolean = c == 't';
      return absl::OkStatus();
    }
    if (Literal("null")) return absl::OkStatus();
    return Number(v);
  }

  absl::Status Object(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kObject;
    ++i_;
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == '}') return ++i_, absl::OkStatus();
    std::unordered_set<std::string> keys;
    for (;;) {
      SkipSpace();
      std::string key;
      if (i_ >= s_.size() || s_[i_] != '"') return Error("expected a key");
      if (absl::Status st = String(&key); !st.ok()) return st;
      if (!keys.insert(key).second) return Error(absl::StrCat("duplicate key \"", key, "\""));
      SkipSpace();
      if (i_ >= s_.size() || s_[i_++] != ':') return Error("expected ':'");
      v->object.emplace_back(std::move(key), JsonValue{});
      if (absl::Status st = Value(&v->object.back().second, depth + 1); !st.ok()) return st;
      SkipSpace();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, absl::OkStatus();
      return Error("expected ',' or '}'");
    }
  }

  absl::Status Array(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kArray;
    ++i_;
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == ']') return ++i_, absl::OkStatus();
    for (;;) {
      v->array.emplace_back();
      if (absl::Status st = Value(&v->array.back(), depth + 1); !st.ok()) return st;
      SkipSpace();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, absl::OkStatus();
      return Error("expected ',' or ']'");
    }
  }

  absl::Status String(std::string* out) {
    ++i_;  // the opening quote
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out->push_back(e); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          if (absl::Status st = Unicode(out); !st.ok()) return st;
          break;
        }
        default: return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  // \uXXXX (a surrogate pair as two), written as UTF-8.
  absl::Status Unicode(std::string* out) {
    auto hex4 = [&](uint32_t* cp) {
      if (i_ + 4 > s_.size()) return false;
      char buf[5] = {s_[i_], s_[i_ + 1], s_[i_ + 2], s_[i_ + 3], 0};
      char* end = nullptr;
      *cp = static_cast<uint32_t>(std::strtoul(buf, &end, 16));
      if (end != buf + 4) return false;
      i_ += 4;
      return true;
    };
    uint32_t cp = 0;
    if (!hex4(&cp)) return Error("bad \\u escape");
    if (cp >= 0xD800 && cp < 0xDC00) {
      uint32_t low = 0;
      if (!Literal("\\u") || !hex4(&low) || low < 0xDC00 || low >= 0xE000) return Error("bad surrogate pair");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      return Error("bad surrogate pair");
    }
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return absl::OkStatus();
  }

  absl::Status Number(JsonValue* v) {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > from;
    };
    if (!digits()) return Error("expected a value");
    bool integer = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      integer = false;
      if (!digits()) return Error("bad number");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      integer = false;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return Error("bad number");
    }
    const std::string text(s_.substr(start, i_ - start));
    v->type = JsonValue::Type::kNumber;
    v->number = std::strtod(text.c_str(), nullptr);
    v->integer = integer;
    if (!std::isfinite(v->number)) return Error("number out of range");
    return absl::OkStatus();
  }

  absl::string_view s_;
  size_t i_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [k, v] : object) {
    if (k == key) return &v;
  }
  return nullptr;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) { return Parser(text).Document(); }

}  // namespace muloco
