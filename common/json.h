// A small strict JSON reader for headers that peers and users hand us (a safetensors file's
// header): objects, arrays, strings, numbers, true/false/null, with bounds on size and
// nesting. Keys keep their order of appearance. Not a general-purpose library: no writer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muloco {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  bool integer = false;  // the number was written without fraction or exponent
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in order; duplicate keys are refused

  // The member named `key` of an object, or null.
  const JsonValue* Find(absl::string_view key) const;
};

// Parses `text` as one JSON value (surrounding whitespace allowed). INVALID_ARGUMENT naming
// the byte offset on any error, including nesting deeper than 64.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace muloco
