// Command-line set-up shared by the binaries: flag parsing and a --help grouped by subject.
#pragma once

#include <string>

namespace muloco {

// Parses flags (exits 2 on a bad flag or a positional argument). --help prints every
// flag grouped by subject, run-config values as the chosen preset and --config resolve
// them, and exits 0.
void ParseCommandLine(int argc, char** argv, const char* usage);

}  // namespace muloco
