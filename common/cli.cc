// ParseCommandLine: absl flags, with a --help of our own: grouped by subject, run-config
// values shown as the chosen preset (and --config file) resolve them, exit status 0.
#include "common/cli.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/run_config.h"
#include "common/run_config_flags.h"

ABSL_DECLARE_FLAG(bool, print_config);

namespace muloco {
namespace {

// The subject a flag is listed under in --help.
std::string Subject(const absl::CommandLineFlag& f) {
  const std::string name(f.Name());
  if (absl::StrContains(f.Filename(), "run_config_flags")) {
    return name == "preset" || name == "config" || name == "print_config"
               ? "1 Run configuration: where it comes from"
               : "2 Run configuration (the server sends it to workers; values shown are the preset's, after --config)";
  }
  auto any = [&](std::initializer_list<const char*> prefixes) {
    for (const char* p : prefixes)
      if (absl::StartsWith(name, p)) return true;
    return false;
  };
  if (any({"insecure", "tls_", "join_tokens", "open_join", "token_file"})) return "4 Security";
  if (any({"max_", "idle_timeout", "transport_memory", "robust"})) return "5 Limits and screening";
  if (any({"checkpoint", "keep_checkpoints", "save_final", "export"})) return "6 Checkpoints and output";
  if (any({"metrics_listen", "progress"})) return "7 Monitoring";
  if (any({"flagfile", "fromenv", "tryfromenv", "undefok"})) return "8 Flag files";
  if (absl::StrContains(f.Filename(), "absl/")) return "";
  return "3 Operation";
}

// The value a run-config flag has in `config` ("" when it is not a run-config field).
std::string ConfigValue(const v1::RunConfig& config, const std::string& flag) {
  std::string out;
  auto walk = [&](const google::protobuf::Message& m, const std::string& prefix, auto& self) -> void {
    const google::protobuf::Descriptor* d = m.GetDescriptor();
    for (int i = 0; i < d->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* fd = d->field(i);
      if (fd->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        self(m.GetReflection()->GetMessage(m, fd), prefix + fd->name() + ".", self);
      } else if (FlagForField(prefix + fd->name()) == flag) {
        google::protobuf::TextFormat::PrintFieldValueToString(m, fd, -1, &out);
      }
    }
  };
  walk(config, "", walk);
  return out;
}

[[noreturn]] void PrintHelp(const char* usage) {
  absl::StatusOr<v1::RunConfig> config = ResolveRunConfig();
  std::map<std::string, std::vector<const absl::CommandLineFlag*>> groups;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string subject = Subject(*flag);
    if (!subject.empty()) groups[subject].push_back(flag);
  }
  std::printf("%s\n", usage);
  for (auto& [subject, flags] : groups) {
    std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
    std::printf("\n%s:\n", subject.substr(2).c_str());
    for (const absl::CommandLineFlag* f : flags) {
      const std::string name(f->Name());
      std::string value = f->DefaultValue();
      if (config.ok() && subject[0] == '2') value = ConfigValue(*config, name);
      if (value.empty()) value = "\"\"";
      std::printf("  --%s (%s);\n      default: %s\n", name.c_str(), f->Help().c_str(), value.c_str());
    }
  }
  std::exit(0);
}

}  // namespace

void ParseCommandLine(int argc, char** argv, const char* usage) {
  // --help is answered after parsing, so that it can show the values --preset and --config
  // resolve to; absl's own would exit 1 before that.
  std::vector<char*> args;
  bool help = false;
  for (int i = 0; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (i > 0 && (a == "--help" || a == "-help" || a == "--helpfull" || a == "-h")) {
      help = true;
      continue;
    }
    args.push_back(argv[i]);
  }
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (rest.size() > 1) {
    std::fprintf(stderr, "unexpected argument '%s' (flags are --name=value; see --help)\n", rest[1]);
    std::exit(2);
  }
  if (help) PrintHelp(usage);
  if (absl::GetFlag(FLAGS_print_config)) RunConfigFromFlags();  // prints and exits, in both binaries
}

}  // namespace muloco
