// Minimal timestamped logging to stderr: one line per call, safe from any thread.
#pragma once

#include <cstdarg>

namespace muloco {

// printf-style; prefixes a wall-clock timestamp and `tag` (e.g. "server", "worker 3").
void Logf(const char* tag, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace muloco
