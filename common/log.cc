// Logf: formats into one buffer so concurrent lines never interleave.
#include "common/log.h"

#include <sys/time.h>

#include <cstdio>
#include <cstring>
#include <ctime>

namespace muloco {

void Logf(const char* tag, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  localtime_r(&tv.tv_sec, &t);
  char line[2200];
  int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03d [%s] %s\n", t.tm_hour, t.tm_min, t.tm_sec,
                   static_cast<int>(tv.tv_usec / 1000), tag, msg);
  fwrite(line, 1, n < static_cast<int>(sizeof line) ? n : sizeof line - 1, stderr);
  fflush(stderr);
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
