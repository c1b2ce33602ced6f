// Checkpoint files (see checkpoint.h).
#include "server/checkpoint.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/checksum.h"
#include "common/file_io.h"
#include "common/log.h"

namespace muloco {
namespace {

constexpr char kMagic[4] = {'M', 'L', 'C', 'K'};
// 4: with Delayed Nesterov's sum and count; 3: without them (read as none); 2: without the
// layout; 1: without the join counter (read as 0).
constexpr uint32_t kVersion = 4;
constexpr uint64_t kSeed = 0x636b7074ULL;

void Put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <typename T>
void PutScalar(std::string& out, T v) { Put(out, &v, sizeof v); }
void PutFloats(std::string& out, const std::vector<float>& v) {
  PutScalar<uint64_t>(out, v.size());
  Put(out, v.data(), v.size() * sizeof(float));
}

// Bounds-checked reader over the file bytes.
struct Reader {
  const std::string& b;
  size_t pos = 0;
  bool Take(void* dst, size_t n) {
    if (n > b.size() - pos) return false;
    std::memcpy(dst, b.data() + pos, n);
    pos += n;
    return true;
  }
  template <typename T>
  bool Scalar(T* v) { return Take(v, sizeof *v); }
  bool Floats(std::vector<float>* v) {
    uint64_t n;
    if (!Scalar(&n) || n > (b.size() - pos) / sizeof(float)) return false;
    v->resize(n);
    return Take(v->data(), n * sizeof(float));
  }
};

std::vector<std::string> CheckpointFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (absl::StartsWith(name, "ckpt-") && absl::EndsWith(name, ".bin")) files.push_back(name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());  // zero-padded rounds: lexical = numeric order
  return files;
}


}  // namespace

std::string SerializeCheckpoint(const ServerState& s) {
  std::string out;
  Put(out, kMagic, 4);
  PutScalar<uint32_t>(out, kVersion);
  PutScalar<uint64_t>(out, s.open_round);
  PutScalar<uint64_t>(out, s.joins);
  for (const std::string& message : {s.config.SerializeAsString(), s.layout.SerializeAsString()}) {
    PutScalar<uint64_t>(out, message.size());
    out += message;
  }
  PutFloats(out, s.theta_true);
  Put(out, s.theta_pub.data(), s.theta_pub.size() * sizeof(float));
  PutFloats(out, s.momentum);
  PutFloats(out, s.delayed_sum);
  PutScalar<uint32_t>(out, s.delayed_steps);
  PutScalar<uint64_t>(out, Checksum64(out.data(), out.size(), kSeed));
  return out;
}

absl::StatusOr<ServerState> ParseCheckpoint(const std::string& bytes) {
  auto bad = [](const std::string& m) { return absl::DataLossError("checkpoint: " + m); };
  if (bytes.size() < 4 + 4 + 8 + 8) return bad(absl::StrCat("truncated (", bytes.size(), " bytes)"));
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (Checksum64(bytes.data(), bytes.size() - 8, kSeed) != stored) return bad("checksum mismatch (truncated or corrupt)");
  Reader r{bytes};
  char magic[4];
  uint32_t version;
  uint64_t config_len;
  ServerState s;
  if (!r.Take(magic, 4) || std::memcmp(magic, kMagic, 4) != 0) return bad("bad magic");
  if (!r.Scalar(&version) || version < 1 || version > kVersion) return bad(absl::StrCat("unsupported version ", version));
  if (!r.Scalar(&s.open_round) || (version >= 2 && !r.Scalar(&s.joins)) || !r.Scalar(&config_len) || config_len > bytes.size() - r.pos) return bad("bad header");
  if (!s.config.ParseFromArray(bytes.data() + r.pos, static_cast<int>(config_len))) return bad("bad run config");
  r.pos += config_len;
  if (version >= 3) {
    uint64_t layout_len;
    if (!r.Scalar(&layout_len) || layout_len > bytes.size() - r.pos) return bad("bad header");
    if (!s.layout.ParseFromArray(bytes.data() + r.pos, static_cast<int>(layout_len))) return bad("bad layout");
    r.pos += layout_len;
  }
  if (!r.Floats(&s.theta_true)) return bad("bad parameters");
  s.theta_pub.resize(s.theta_true.size());
  if (!r.Take(s.theta_pub.data(), s.theta_pub.size() * sizeof(float))) return bad("bad public parameters");
  if (!r.Floats(&s.momentum) || (!s.momentum.empty() && s.momentum.size() != s.theta_true.size())) {
    return bad("bad momentum");
  }
  if (version >= 4 && (!r.Floats(&s.delayed_sum) || !r.Scalar(&s.delayed_steps) ||
                       (!s.delayed_sum.empty() && s.delayed_sum.size() != s.theta_true.size()))) {
    return bad("bad delayed momentum");
  }
  if (r.pos != bytes.size() - 8) return bad("trailing bytes");
  return s;
}

absl::Status WriteCheckpoint(const std::string& dir, const ServerState& state, size_t keep) {
  const std::string path = dir + "/" + absl::StrFormat("ckpt-%012u.bin", state.open_round);
  if (absl::Status s = WriteFileAtomic(path, SerializeCheckpoint(state)); !s.ok()) return s;
  std::vector<std::string> files = CheckpointFiles(dir);
  for (size_t i = 0; i + std::max<size_t>(1, keep) < files.size(); ++i) std::remove((dir + "/" + files[i]).c_str());
  return absl::OkStatus();
}

absl::StatusOr<ServerState> LoadNewestCheckpoint(const std::string& dir) {
  std::vector<std::string> files = CheckpointFiles(dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    const std::string path = dir + "/" + *it;
    absl::StatusOr<std::string> bytes = ReadFile(path);
    absl::StatusOr<ServerState> s = bytes.ok() ? ParseCheckpoint(*bytes) : bytes.status();
    if (s.ok()) return s;
    LogWarn("server", "skipping checkpoint %s: %s", path.c_str(), std::string(s.status().message()).c_str());
  }
  return absl::NotFoundError(absl::StrCat("no usable checkpoint in ", dir));
}

}  // namespace muloco
