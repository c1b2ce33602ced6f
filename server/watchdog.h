// Cancels streaming calls that stop making progress: a peer that opens a stream and then
// neither reads nor writes would otherwise hold a server thread (sync gRPC API) and its
// buffers forever. Each call registers a Watch and marks progress after every chunk moved;
// a call idle for longer than idle_timeout_s is cancelled (ServerContext::TryCancel), which
// ends its blocked Read or Write.
#pragma once

#include <grpcpp/server_context.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/periodic.h"

namespace muloco {

class Watchdog {
 public:
  // `clock` must outlive the watchdog. Checks every `period_s`.
  Watchdog(double idle_timeout_s, const Clock* clock, double period_s = 0.5);
  ~Watchdog();

  class Watch {
   public:
    ~Watch();
    void Progress();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

   private:
    friend class Watchdog;
    Watch(Watchdog* dog, uint64_t id) : dog_(dog), id_(id) {}
    Watchdog* const dog_;
    const uint64_t id_;
  };
  // REQUIRES: ctx outlives the returned Watch.
  std::unique_ptr<Watch> Start(grpc::ServerContext* ctx);

  uint64_t cancelled() const { return cancelled_.load(); }
  // Streams being watched now (calls moving data, or idle for less than idle_timeout_s).
  size_t watched();

 private:
  struct Entry {
    grpc::ServerContext* ctx;
    double last_progress;
  };
  void Check();

  const double idle_timeout_s_;
  const Clock* const clock_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> cancelled_{0};
  PeriodicThread thread_;               // last: starts after the fields above exist
};

}  // namespace muloco
