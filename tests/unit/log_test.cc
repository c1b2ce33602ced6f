// Log lines: the exact shape "YYYY-MM-DDTHH:MM:SS.mmmZ LEVEL [tag] message" (UTC, close to
// now), the three level words, control characters escaped so that one call is one line, and
// lines from concurrent threads never interleave. stderr is captured through a temp file.
#include "common/log.h"

#include <gtest/gtest.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace muloco {
namespace {

// Seconds on the clock the logger stamps lines with (gettimeofday): time() reads a coarser
// clock that can still say second N when the logger's already says N+1.
time_t WallSeconds() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return tv.tv_sec;
}

// Redirects fd 2 to a temp file while alive; Lines() reads what was written so far.
class CaptureStderr {
 public:
  CaptureStderr() {
    char path[] = "/tmp/muloco_log_test.XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    path_ = path;
    saved_ = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~CaptureStderr() {
    Restore();
    unlink(path_.c_str());
  }
  void Restore() {
    if (saved_ < 0) return;
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }
  std::string Text() const {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::vector<std::string> Lines() const {
    std::vector<std::string> out;
    std::stringstream ss(Text());
    for (std::string line; std::getline(ss, line);) out.push_back(line);
    return out;
  }

 private:
  std::string path_;
  int saved_ = -1;
};

// Groups: 1-7 date and time, 8 level, 9 tag, 10 message.
const std::regex kLine(
    R"(^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z (INFO|WARN|ERROR) \[([^\]]*)\] (.*)$)");

TEST(Log, LineShapeAndLevels) {
  CaptureStderr capture;
  const time_t before = WallSeconds();
  Logf("server", "round %d closed: %s", 3, "2 contributors");
  LogWarn("worker w0", "server unavailable (%s); retrying", "connection refused");
  LogError("worker w1", "%s", "INTERNAL: boom");
  const time_t after = WallSeconds();
  capture.Restore();
  const std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), 3u) << capture.Text();
  const char* levels[] = {"INFO", "WARN", "ERROR"};
  const char* tags[] = {"server", "worker w0", "worker w1"};
  const char* messages[] = {"round 3 closed: 2 contributors", "server unavailable (connection refused); retrying",
                            "INTERNAL: boom"};
  for (int i = 0; i < 3; ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, kLine)) << lines[i];
    EXPECT_EQ(m[8], levels[i]);
    EXPECT_EQ(m[9], tags[i]);
    EXPECT_EQ(m[10], messages[i]);
    // UTC and now: the stamp falls between the clock read before and after (to the second).
    std::tm t = {};
    t.tm_year = std::stoi(m[1]) - 1900;
    t.tm_mon = std::stoi(m[2]) - 1;
    t.tm_mday = std::stoi(m[3]);
    t.tm_hour = std::stoi(m[4]);
    t.tm_min = std::stoi(m[5]);
    t.tm_sec = std::stoi(m[6]);
    const time_t stamp = timegm(&t);
    EXPECT_GE(stamp, before) << lines[i];
    EXPECT_LE(stamp, after) << lines[i];
  }
}

TEST(Log, LevelNames) {
  EXPECT_STREQ(LogLevelName(LogLevel::kInfo), "INFO");
  EXPECT_STREQ(LogLevelName(LogLevel::kWarn), "WARN");
  EXPECT_STREQ(LogLevelName(LogLevel::kError), "ERROR");
}

TEST(Log, ControlCharactersCannotStartALine) {
  CaptureStderr capture;
  Logf("server", "evil\n2026-01-01T00:00:00.000Z INFO [server] forged\r\x1b[2J\x07 end");
  Logf("tag\nwith newline", "ok");
  capture.Restore();
  const std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), 2u) << capture.Text();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, kLine)) << lines[0];
  EXPECT_EQ(m[10], "evil\\n2026-01-01T00:00:00.000Z INFO [server] forged\\r\\x1b[2J\\x07 end");
  ASSERT_TRUE(std::regex_match(lines[1], m, kLine)) << lines[1];
  EXPECT_EQ(m[9], "tag\\nwith newline");
}

TEST(Log, LongMessagesAreCutNotSplit) {
  CaptureStderr capture;
  const std::string big(10000, 'x');
  Logf("server", "%s", big.c_str());
  capture.Restore();
  const std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(std::regex_match(lines[0], kLine));
}

TEST(Log, ConcurrentLinesNeverInterleave) {
  constexpr int kThreads = 2, kLines = 1000;
  CaptureStderr capture;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      const std::string filler(100 + 50 * t, static_cast<char>('a' + t));  // long enough to tear if split
      for (int i = 0; i < kLines; ++i) Logf(t ? "t1" : "t0", "line %d %s end", i, filler.c_str());
    });
  }
  for (std::thread& th : threads) th.join();
  capture.Restore();
  const std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), size_t{kThreads * kLines});
  const std::regex body(R"(line (\d+) ([a-z]+) end)");
  std::map<std::string, int> next;  // per tag: each thread's lines arrive whole and in order
  for (const std::string& line : lines) {
    std::smatch m, b;
    ASSERT_TRUE(std::regex_match(line, m, kLine)) << line;
    const std::string tag = m[9], msg = m[10];
    ASSERT_TRUE(std::regex_match(msg, b, body)) << line;
    const int t = tag == "t1" ? 1 : 0;
    EXPECT_EQ(b[2].str(), std::string(100 + 50 * t, static_cast<char>('a' + t))) << line;
    EXPECT_EQ(std::stoi(b[1]), next[tag]++) << line;
  }
  EXPECT_EQ(next["t0"], kLines);
  EXPECT_EQ(next["t1"], kLines);
}

}  // namespace
}  // namespace muloco
