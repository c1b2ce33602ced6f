// Command-line set-up shared by the binaries: --help lists every muloco flag with its default.
#pragma once

namespace muloco {

// Parses flags (exits on --help or a bad flag). Positional arguments are refused.
void ParseCommandLine(int argc, char** argv, const char* usage);

}  // namespace muloco
