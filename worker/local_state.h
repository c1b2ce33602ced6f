// A worker's local training on disk (--state_file): a header line naming the run and where
// the saved progress counts from, then the trainer's bytes (Trainer::SaveState). A worker
// killed mid-round and restarted on the file resumes those steps (session.cc).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muloco {

struct LocalState {
  uint64_t run = 0;         // the run configuration's checksum (RunConfigText)
  uint64_t base_round = 0;  // the public version the progress counts from
  bool in_flight = false;   // the base is a pushed round's parameters, its update not yet landed
  uint32_t steps = 0;       // inner steps of progress since the base
  std::string trainer;      // Trainer::SaveState
};

// Written atomically (common/file_io.h).
absl::Status WriteLocalState(const std::string& path, const LocalState& state);
// NOT_FOUND when there is no file; INVALID_ARGUMENT, naming the path, for one that is not a
// state file.
absl::StatusOr<LocalState> ReadLocalState(const std::string& path);

}  // namespace muloco
