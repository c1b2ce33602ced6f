// Logf / LogWarn / LogError: each line is formatted into one buffer and written with a
// single write(2) under a mutex, so concurrent lines never interleave.
#include "common/log.h"

#include <atomic>

#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace muloco {
namespace {

constexpr size_t kMaxMessage = 2048;  // longer messages are cut (before escaping)

// Appends msg to out with control characters escaped (\n, \r, \t kept readable; others \xNN).
void AppendEscaped(const char* msg, std::string* out) {
  for (const char* p = msg; *p; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c < 0x20 && c != '\t') {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out->append(hex);
    } else if (c == 0x7f) {
      out->append("\\x7f");
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

void WriteAll(const std::string& line) {
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  for (size_t off = 0; off < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to log to
    off += static_cast<size_t>(n);
  }
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

namespace {
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void SetMinLogLevel(LogLevel level) { min_level = static_cast<int>(level); }

void VLog(LogLevel level, const char* tag, const char* fmt, va_list ap) {
  if (static_cast<int>(level) < min_level) return;
  char msg[kMaxMessage];
  vsnprintf(msg, sizeof msg, fmt, ap);
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  gmtime_r(&tv.tv_sec, &t);
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s [", t.tm_year + 1900, t.tm_mon + 1,
                t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(tv.tv_usec / 1000), LogLevelName(level));
  std::string line(prefix);
  AppendEscaped(tag, &line);
  line.append("] ");
  AppendEscaped(msg, &line);
  line.push_back('\n');
  WriteAll(line);
}

void Logf(const char* tag, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLog(LogLevel::kInfo, tag, fmt, ap);
  va_end(ap);
}

void LogWarn(const char* tag, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLog(LogLevel::kWarn, tag, fmt, ap);
  va_end(ap);
}

void LogError(const char* tag, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLog(LogLevel::kError, tag, fmt, ap);
  va_end(ap);
}

std::string SafeName(const std::string& name) {
  std::string out = name.substr(0, 64);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::strchr("._:+-", c) != nullptr;
    if (!ok || c == '\0') c = '_';
  }
  return out.empty() ? "unnamed" : out;
}

}  // namespace muloco
