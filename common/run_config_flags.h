// Command-line flags for every RunConfig field, shared by muloco-server (which hands the
// config to workers) and muloco-worker --baseline (which trains alone). Only main() calls it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "muloco/v1/muloco.pb.h"

namespace muloco {

// Preset, then the --config file (`config_file` when --config is not given), then the flags
// given. Exits 2 with the reason when something does not parse; prints the result and exits 0
// under --print_config.
v1::RunConfig RunConfigFromFlags(const std::string& config_file = "");
// The same without exiting (for --help, which shows the resolved values).
absl::StatusOr<v1::RunConfig> ResolveRunConfig(const std::string& config_file = "");

// Whether --name was set on the command line, in a --flagfile or by --fromenv: lets a
// preset's (or config file's) values stand unless a flag overrides them.
bool FlagGiven(const std::string& name);

}  // namespace muloco
