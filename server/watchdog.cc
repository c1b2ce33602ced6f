// Watchdog (see watchdog.h).
#include "server/watchdog.h"

namespace muloco {

Watchdog::Watchdog(double idle_timeout_s, const Clock* clock, double period_s)
    : idle_timeout_s_(idle_timeout_s), clock_(clock), thread_([this, period_s] { Loop(period_s); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::unique_ptr<Watchdog::Watch> Watchdog::Start(grpc::ServerContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  entries_[id] = Entry{ctx, clock_->Now()};
  return std::unique_ptr<Watch>(new Watch(this, id));
}

Watchdog::Watch::~Watch() {
  std::lock_guard<std::mutex> lock(dog_->mu_);
  dog_->entries_.erase(id_);
}

void Watchdog::Watch::Progress() {
  std::lock_guard<std::mutex> lock(dog_->mu_);
  auto it = dog_->entries_.find(id_);
  if (it != dog_->entries_.end()) it->second.last_progress = dog_->clock_->Now();
}

void Watchdog::Loop(double period_s) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(period_s), [&] { return stop_; })) {
    const double now = clock_->Now();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (now - it->second.last_progress > idle_timeout_s_) {
        it->second.ctx->TryCancel();  // the handler's Watch is still alive: ctx is valid
        ++cancelled_;
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace muloco
