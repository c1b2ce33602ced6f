// ParseCommandLine: absl flags with --help covering the project's own flags.
#include "common/cli.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace muloco {

void ParseCommandLine(int argc, char** argv, const char* usage) {
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view file) { return !absl::StrContains(file, "absl/"); };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "unexpected argument '%s' (flags are --name=value; see --help)\n", rest[1]);
    std::exit(2);
  }
}

}  // namespace muloco
