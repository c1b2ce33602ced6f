// Minimal timestamped logging to stderr: one line per call, safe from any thread.
#pragma once

#include <cstdarg>
#include <string>

namespace muloco {

// printf-style; prefixes a wall-clock timestamp and `tag` (e.g. "server", "worker 3").
void Logf(const char* tag, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// A peer-supplied name made safe for logs and metric labels: at most 64 characters from
// [A-Za-z0-9._:+-], anything else replaced by '_'; empty becomes "unnamed".
std::string SafeName(const std::string& name);

}  // namespace muloco
