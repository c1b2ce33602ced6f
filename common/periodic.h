// PeriodicThread: calls tick() every period_s on its own thread until tick returns false or
// the object is destroyed; the destructor wakes the thread at once and joins it. The one
// implementation behind the worker's heartbeats and stop watcher and the server's watchdog.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace muloco {

class PeriodicThread {
 public:
  PeriodicThread(double period_s, std::function<bool()> tick)
      : thread_([this, period_s, tick = std::move(tick)] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, std::chrono::duration<double>(period_s), [&] { return stop_; })) {
            lock.unlock();
            const bool again = tick();
            lock.lock();
            if (!again) return;
          }
        }) {}
  ~PeriodicThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;    // guarded by mu_
  std::thread thread_;   // last: starts after the fields above exist
};

}  // namespace muloco
