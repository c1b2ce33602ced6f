// The worker's one retry policy: which failures are transient, and how long to wait before
// the next try (exponential backoff from 0.1 s to 5 s with ±50% jitter; at most 1 s while the
// server is unreachable, see Backoff::Next). Session calls go
// through Retry (worker/session.cc); the gRPC client paces the resumed pieces of one model
// fetch with the same Backoff. A long poll that ends with the round still open (AwaitRound's
// DEADLINE_EXCEEDED) is not a failure: it is asked again at once, without backoff.
#pragma once

#include <chrono>
#include <functional>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/log.h"

namespace muloco {

// What a transient failure means, for the retry log line; nullptr: not transient.
//   UNAVAILABLE: the server is down, restarting, or the link is cut;
//   RESOURCE_EXHAUSTED: a server limit (joins per minute, calls in flight);
//   CANCELLED: a server shutting down cancels the calls in flight;
//   DEADLINE_EXCEEDED: the call timed out.
const char* TransientReason(absl::StatusCode code);

class Backoff {
 public:
  explicit Backoff(double first_s = 0.1, double max_s = 5) : first_s_(first_s), max_s_(max_s), next_s_(first_s) {}
  // The wait before the next try: the current step ±50%, then the step doubles (up to max_s).
  // After UNAVAILABLE (the server down, the link cut) the wait is at most kUnreachableMaxS:
  // asking an unreachable server again costs it nothing (the channel paces its reconnects
  // itself, at most 2 s apart: worker/client.cc), and a longer wait only delays the first
  // call once the link is back. A busy server (RESOURCE_EXHAUSTED) is given the full backoff.
  static constexpr double kUnreachableMaxS = 1;
  double Next(absl::StatusCode why = absl::StatusCode::kUnknown);
  // Back to the first step (after progress).
  void Reset() { next_s_ = first_s_; }

 private:
  const double first_s_, max_s_;
  double next_s_;
  std::mt19937_64 rng_{std::random_device{}()};
};

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) { return s.status(); }

// Calls fn until it returns anything but a transient code, for at most timeout_s, waiting
// Backoff().Next() between tries through `nap` (which returns false when the worker is
// stopping: then the last result is returned). Logs one warning per change of code.
template <typename F>
auto Retry(F fn, double timeout_s, const std::function<bool(double)>& nap, const char* log_tag) -> decltype(fn()) {
  const auto start = std::chrono::steady_clock::now();
  Backoff backoff;
  for (absl::StatusCode logged = absl::StatusCode::kOk;;) {
    auto result = fn();
    const absl::StatusCode code = StatusOf(result).code();
    const char* reason = TransientReason(code);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (reason == nullptr || waited > timeout_s) return result;
    if (code != logged) LogWarn(log_tag, "%s (%s); retrying", reason, std::string(StatusOf(result).message()).c_str());
    logged = code;
    if (!nap(backoff.Next(code))) return result;
  }
}

}  // namespace muloco
