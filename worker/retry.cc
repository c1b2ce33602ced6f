// TransientReason and Backoff (see retry.h).
#include "worker/retry.h"

#include <algorithm>

namespace muloco {

const char* TransientReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
      return "server unavailable";
    case absl::StatusCode::kResourceExhausted:
      return "server busy";
    case absl::StatusCode::kCancelled:
      return "call cancelled";
    case absl::StatusCode::kDeadlineExceeded:
      return "call timed out";
    default:
      return nullptr;
  }
}

double Backoff::Next(absl::StatusCode why) {
  const double step = why == absl::StatusCode::kUnavailable ? std::min(next_s_, kUnreachableMaxS) : next_s_;
  const double wait = step * std::uniform_real_distribution<>(0.5, 1.5)(rng_);
  next_s_ = std::min(max_s_, next_s_ * 2);
  return wait;
}

}  // namespace muloco
