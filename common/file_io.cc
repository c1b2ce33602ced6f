// File helpers (see file_io.h).
#include "common/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace muloco {
namespace {

absl::Status Fail(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status Sync(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags);
  if (fd < 0) return Fail("cannot open", path);
  const int rc = fsync(fd);
  close(fd);
  return rc == 0 ? absl::OkStatus() : Fail("cannot fsync", path);
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return Fail("cannot write", tmp);
  }
  if (absl::Status s = Sync(tmp, O_RDONLY); !s.ok()) return s;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Fail("cannot rename to", path);
  std::string dir = std::filesystem::path(path).parent_path().string();
  return Sync(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
}

absl::Status WriteFloatsAtomic(const std::string& path, const std::vector<float>& values) {
  return WriteFileAtomic(path, absl::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create directory ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace muloco
