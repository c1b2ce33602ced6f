// Time source seam: the round engine reads time only through Clock so tests can drive it.
#pragma once

#include <atomic>
#include <chrono>

namespace muloco {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since an arbitrary, fixed origin; never decreases.
  virtual double Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  double Now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

// A clock that moves only when told to (tests).
class FakeClock final : public Clock {
 public:
  double Now() const override { return now_.load(); }
  void Advance(double seconds) { now_.store(now_.load() + seconds); }

 private:
  std::atomic<double> now_{1000.0};
};

}  // namespace muloco
