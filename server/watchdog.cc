// Watchdog (see watchdog.h).
#include "server/watchdog.h"

namespace muloco {

Watchdog::Watchdog(double idle_timeout_s, const Clock* clock, double period_s)
    : idle_timeout_s_(idle_timeout_s), clock_(clock), thread_(period_s, [this] {
        Check();
        return true;
      }) {}

Watchdog::~Watchdog() = default;

std::unique_ptr<Watchdog::Watch> Watchdog::Start(grpc::ServerContext* ctx) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  entries_[id] = Entry{ctx, clock_->Now()};
  return std::unique_ptr<Watch>(new Watch(this, id));
}

Watchdog::Watch::~Watch() {
  absl::MutexLock lock(&dog_->mu_);
  dog_->entries_.erase(id_);
}

void Watchdog::Watch::Progress() {
  absl::MutexLock lock(&dog_->mu_);
  auto it = dog_->entries_.find(id_);
  if (it != dog_->entries_.end()) it->second.last_progress = dog_->clock_->Now();
}

size_t Watchdog::watched() {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void Watchdog::Check() {
  absl::MutexLock lock(&mu_);
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

}  // namespace muloco
