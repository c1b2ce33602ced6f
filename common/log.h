// Timestamped logging to stderr, safe from any thread. Every call writes exactly one line,
// in one write(2), shaped
//   2026-12-03T16:20:01.123Z INFO [worker w0] round 3: train_loss 2.31
// (UTC, milliseconds; the level is INFO, WARN or ERROR). Control characters in the message
// (a newline, say) are written as escapes, so one call can never look like two lines.
#pragma once

#include <cstdarg>
#include <string>

namespace muloco {

enum class LogLevel { kInfo, kWarn, kError };

// printf-style; prefixes the time, the level and `tag` (e.g. "server", "worker w0").
// Logf logs at INFO.
void Logf(const char* tag, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void LogWarn(const char* tag, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void LogError(const char* tag, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void VLog(LogLevel level, const char* tag, const char* fmt, va_list ap) __attribute__((format(printf, 3, 0)));

// Lines below `level` are dropped from now on (default kInfo: everything). For tools whose
// own output is the point (benchmarks); servers and workers log everything.
void SetMinLogLevel(LogLevel level);

// "INFO", "WARN" or "ERROR".
const char* LogLevelName(LogLevel level);

// A peer-supplied name made safe for logs and metric labels: at most 64 characters from
// [A-Za-z0-9._:+-], anything else replaced by '_'; empty becomes "unnamed".
std::string SafeName(const std::string& name);

}  // namespace muloco
