// Command-line set-up shared by the binaries: --help lists every muloco flag with its default.
#pragma once

#include <string>

namespace muloco {

// Parses flags (exits on --help or a bad flag). Positional arguments are refused.
void ParseCommandLine(int argc, char** argv, const char* usage);

// Whether --name (or --noname for booleans) appeared on the command line ParseCommandLine
// saw; lets a preset's values stand unless a flag overrides them.
bool FlagGiven(const std::string& name);

}  // namespace muloco
