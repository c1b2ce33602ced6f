// Files: whole-file reads, atomic replacement (temporary file, fsync, rename, fsync of the
// directory: a reader sees the old file or the new one, never half of one, even after a
// crash), and directory creation. The one place the project writes files it must not lose.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muloco {

absl::StatusOr<std::string> ReadFile(const std::string& path);
// UNAVAILABLE naming the path and the step that failed.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes);
// WriteFileAtomic of raw native fp32 values (--save_final files).
absl::Status WriteFloatsAtomic(const std::string& path, const std::vector<float>& values);
// Creates `dir` and its parents (std::filesystem); OK when it exists.
absl::Status MakeDirs(const std::string& dir);

}  // namespace muloco
