// LocalState files (see local_state.h): "muloco-worker-state 1 RUN BASE_ROUND IN_FLIGHT STEPS\n"
// (RUN in hex), then the trainer's bytes.
#include "worker/local_state.h"

#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"

namespace muloco {
namespace {
constexpr char kMagic[] = "muloco-worker-state";
constexpr int kVersion = 1;
}  // namespace

absl::Status WriteLocalState(const std::string& path, const LocalState& s) {
  const std::string header = absl::StrFormat("%s %d %016x %u %d %u\n", kMagic, kVersion, s.run, s.base_round,
                                             s.in_flight ? 1 : 0, s.steps);
  return WriteFileAtomic(path, header + s.trainer);
}

absl::StatusOr<LocalState> ReadLocalState(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  const size_t eol = bytes->find('\n');
  LocalState s;
  char magic[32] = {};
  int version = 0, in_flight = 0;
  unsigned long long run = 0, base_round = 0;
  unsigned steps = 0;
  int used = 0;
  const std::string header = bytes->substr(0, eol == std::string::npos ? 0 : eol);
  if (eol == std::string::npos || eol > 200 ||
      std::sscanf(header.c_str(), "%31s %d %llx %llu %d %u%n", magic, &version, &run, &base_round, &in_flight, &steps,
                  &used) != 6 ||
      used != static_cast<int>(header.size()) || std::string(magic) != kMagic || version != kVersion ||
      (in_flight != 0 && in_flight != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a muloco-worker state file (version ", kVersion, ")"));
  }
  s.run = run;
  s.base_round = base_round;
  s.in_flight = in_flight == 1;
  s.steps = steps;
  s.trainer = bytes->substr(eol + 1);
  return s;
}

}  // namespace muloco
