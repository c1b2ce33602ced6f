// Flag definitions for the run configuration, resolved in one order: --preset picks a
// complete configuration (common/run_config.h), a --config file's fields override it, and
// every run-config flag given (on the command line, in a --flagfile or by --fromenv)
// overrides both. --print_config prints the result in the --config format and exits.
#include "common/run_config_flags.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/run_config.h"
#include "common/run_config_fields.h"

namespace {
const muloco::v1::RunConfig& D() {
  static const muloco::v1::RunConfig d = muloco::DefaultRunConfig();
  return d;
}
}  // namespace

ABSL_FLAG(std::string, preset, muloco::kDefaultPreset,
          "Complete configuration: diloco, muloco, muloco-2bit, muloco-1bit, signmuon (a --config file and the "
          "flags below override it)");
ABSL_FLAG(std::string, config, "",
          "Run configuration file in protobuf text format (RunConfig, as --print_config writes it); its fields "
          "override the preset, flags override the file");
ABSL_FLAG(bool, print_config, false, "Print the resolved run configuration in the --config format and exit");
// The run-config flags, one per row of the table; a flag's default is its field's value in
// the default preset.
#define MULOCO_FLAG(type, flag, path, base, help) \
  ABSL_FLAG(type, flag, muloco::RunConfigField<type>(D(), path), help);
MULOCO_RUN_CONFIG_FIELDS(MULOCO_FLAG)
#undef MULOCO_FLAG

namespace muloco {
namespace {

using Setter = std::function<void(v1::RunConfig&)>;

// Each run-config flag and how it writes its field.
std::vector<std::pair<const char*, Setter>> Fields() {
#define MULOCO_SETTER(type, flag, path, base, help) \
  {#flag, [](v1::RunConfig& c) { SetRunConfigField<type>(&c, path, absl::GetFlag(FLAGS_##flag)); }},
  return {MULOCO_RUN_CONFIG_FIELDS(MULOCO_SETTER)};
#undef MULOCO_SETTER
}

}  // namespace

absl::StatusOr<v1::RunConfig> ResolveRunConfig(const std::string& config_file) {
  std::string file_text;
  v1::RunConfig from_file;
  const bool given = FlagGiven("config");
  const std::string path = given ? absl::GetFlag(FLAGS_config) : config_file;
  const std::string label = given ? absl::StrCat("--config=", path) : path;
  if (!path.empty()) {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(label, ": cannot read it"));
    file_text = *std::move(text);
    if (absl::Status s = MergeRunConfigText(file_text, &from_file); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
    }
  }
  // The preset: --preset if given, else the file's, else the default.
  const std::string preset = FlagGiven("preset") || from_file.preset().empty() ? absl::GetFlag(FLAGS_preset)
                                                                                : from_file.preset();
  absl::StatusOr<v1::RunConfig> c = PresetConfig(preset);
  if (!c.ok()) return c.status();
  if (!file_text.empty()) MergeRunConfigText(file_text, &*c).IgnoreError();  // parsed above
  c->set_preset(preset);
  for (const auto& [name, set] : Fields()) {
    if (FlagGiven(name)) set(*c);
  }
  return c;
}

bool FlagGiven(const std::string& name) {
  // absl records every flag its parser set, also from --flagfile and --fromenv (the public
  // CommandLineFlag::IsSpecifiedOnCommandLine is private in Debian's absl 20220623).
  return absl::flags_internal::WasPresentOnCommandLine(name);
}

v1::RunConfig RunConfigFromFlags(const std::string& config_file) {
  absl::StatusOr<v1::RunConfig> c = ResolveRunConfig(config_file);
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
    std::exit(2);
  }
  if (absl::GetFlag(FLAGS_print_config)) {
    std::fputs(RunConfigText(*c).c_str(), stdout);
    std::exit(0);
  }
  return *std::move(c);
}

}  // namespace muloco
