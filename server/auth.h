// Who may join and who a call speaks for; the gRPC service asks, the round engine never
// sees any of it. Join tokens come from a file (one "LABEL TOKEN [weight=W]" per line, '#'
// comments; tokens that share a label are one volunteer, whose weight in the mean is W,
// default 1: a trusted site may count more),
// reloaded when it changes or on SIGHUP; a token removed from the file is revoked, and the
// workers that joined with it are refused at their next call. Each admitted worker gets a
// session: a 128-bit random key that every later call must present with its id.
// Admission is rate-limited (joins per minute, in all and per token) and bounded (live
// workers, in all and per token); calls in flight are bounded per worker.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"

namespace muloco {

struct AuthOptions {
  std::string token_file;                    // "LABEL TOKEN" lines; empty: open joins (needs open_join)
  bool open_join = false;                    // anyone may join, without a token (public runs)
  size_t max_workers = 1024;                 // live sessions in all
  size_t max_workers_per_token = 1;          // live sessions per token (open joins: only max_workers)
  size_t max_joins_per_minute = 600;         // admissions in all, over any 60 s
  size_t max_joins_per_token_per_minute = 60;
  size_t max_streams_per_worker = 4;         // streaming calls in flight per worker
  size_t max_push_attempts_per_round = 8;    // PushUpdate calls per worker per round
};

struct AuthStats {
  uint64_t refused_no_token = 0, refused_bad_token = 0, refused_join_limit = 0;
  uint64_t refused_bad_session = 0, refused_revoked = 0, refused_stream_limit = 0, refused_push_limit = 0;
  uint64_t token_reloads = 0, token_reload_errors = 0;
  size_t sessions = 0, tokens = 0;
};

// Parses a token file's text into token -> label, and (when `weights` is given) label ->
// weight. Tokens must be at least 16 characters; a label's lines must agree on its weight.
absl::StatusOr<std::map<std::string, std::string>> ParseTokenFile(absl::string_view text,
                                                                 std::map<std::string, float>* weights = nullptr);

class Auth {
 public:
  // Reads the token file (if any). INVALID_ARGUMENT when neither a token file nor open_join
  // is given, or the file is unreadable or malformed.
  static absl::StatusOr<std::unique_ptr<Auth>> Create(AuthOptions options, const Clock* clock);

  // Re-reads the token file when its modification time or size changed (always when
  // `force`). A file that fails to parse, holds no tokens (unless open_join) or changes
  // while being read keeps the previous tokens (the error is returned; the next call reads
  // it again).
  absl::Status Reload(bool force);

  // Join admission for `token`: UNAUTHENTICATED (none given), PERMISSION_DENIED (unknown),
  // RESOURCE_EXHAUSTED (a join rate or worker limit). Returns the token's label and holds a
  // place among the live workers until Open(…, token) takes it.
  absl::StatusOr<std::string> Admit(const std::string& token);
  // Opens the session of a worker the engine just joined; returns its key (32 hex digits).
  std::string Open(uint64_t worker_id, const std::string& token);
  // Gives back the place Admit(token) reserved when the join is refused after all (the
  // worker's model does not match); the join still counts against the rate limits.
  void Release(const std::string& token);
  // Checks a call's credentials. NOT_FOUND: no session for this id (join again);
  // UNAUTHENTICATED: no key; PERMISSION_DENIED: wrong key, or the token was revoked (the
  // session is then closed and *revoked set: the caller evicts the worker).
  absl::Status Check(uint64_t worker_id, absl::string_view key, bool* revoked);
  void Close(uint64_t worker_id);
  // Closes every session whose worker `live` says is gone (evicted by the engine).
  template <typename Live>
  void Retain(Live live) {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) it = live(it->first) ? std::next(it) : sessions_.erase(it);
  }

  // One streaming call in flight for a worker, released when destroyed.
  class Stream {
   public:
    Stream(Stream&& o) noexcept : auth_(o.auth_), id_(o.id_) { o.auth_ = nullptr; }
    ~Stream();

   private:
    friend class Auth;
    Stream(Auth* auth, uint64_t id) : auth_(auth), id_(id) {}
    Auth* auth_;
    uint64_t id_;
  };
  // RESOURCE_EXHAUSTED past max_streams_per_worker.
  absl::StatusOr<Stream> BeginStream(uint64_t worker_id);
  // Counts a push attempt for `round`; RESOURCE_EXHAUSTED past max_push_attempts_per_round.
  absl::Status CountPush(uint64_t worker_id, uint64_t round);

  // A label's weight in the mean (1 for unknown labels and open joins).
  float WeightOf(const std::string& label) const;

  AuthStats Stats() const;

 private:
  struct Session {
    std::string key;    // hex
    std::string token;  // "" for open joins
    size_t streams = 0;
    uint64_t push_round = 0, push_attempts = 0;
  };
  Auth(AuthOptions options, const Clock* clock) : options_(std::move(options)), clock_(clock) {}
  bool RateOk(std::deque<double>* joins, size_t per_minute, double now);
  void UnreserveLocked(const std::string& token) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AuthOptions options_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> tokens_ ABSL_GUARDED_BY(mu_);  // token -> label
  std::map<std::string, float> weights_ ABSL_GUARDED_BY(mu_);  // label -> weight
  int64_t file_mtime_ns_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t file_size_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::deque<double> joins_ ABSL_GUARDED_BY(mu_);  // admission times, last minute
  std::map<std::string, std::deque<double>> token_joins_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> reserved_ ABSL_GUARDED_BY(mu_);  // admitted, not yet opened, by token
  size_t reserved_total_ ABSL_GUARDED_BY(mu_) = 0;
  AuthStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muloco
