// PeriodicThread: calls tick() every period_s on its own thread until tick returns false or
// the object is destroyed; the destructor wakes the thread at once and joins it. The one
// implementation behind the worker's heartbeats and stop watcher and the server's watchdog.
#pragma once

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace muloco {

class PeriodicThread {
 public:
  PeriodicThread(double period_s, std::function<bool()> tick)
      : thread_([this, period_s, tick = std::move(tick)] { Loop(absl::Seconds(period_s), tick); }) {}
  ~PeriodicThread() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    thread_.join();
  }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  void Loop(absl::Duration period, const std::function<bool()>& tick) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    for (;;) {
      const absl::Time deadline = absl::Now() + period;
      while (!stop_ && !cv_.WaitWithDeadline(&mu_, deadline)) {
      }
      if (stop_) break;
      mu_.Unlock();
      const bool again = tick();
      mu_.Lock();
      if (!again) break;
    }
    mu_.Unlock();
  }

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;   // last: starts after the fields above exist
};

}  // namespace muloco
