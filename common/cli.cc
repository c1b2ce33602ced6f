// ParseCommandLine: absl flags with --help covering the project's own flags.
#include "common/cli.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace muloco {
namespace {
std::set<std::string>& Given() {
  static std::set<std::string> given;
  return given;
}
}  // namespace

bool FlagGiven(const std::string& name) { return Given().count(name) > 0; }

void ParseCommandLine(int argc, char** argv, const char* usage) {
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view file) { return !absl::StrContains(file, "absl/"); };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
    const std::string name(arg.substr(0, arg.find('=')));
    Given().insert(name);
    if (absl::StartsWith(name, "no")) Given().insert(name.substr(2));
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "unexpected argument '%s' (flags are --name=value; see --help)\n", rest[1]);
    std::exit(2);
  }
}

}  // namespace muloco
