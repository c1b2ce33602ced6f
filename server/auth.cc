// Auth (see auth.h).
#include "server/auth.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>


#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/log.h"

namespace muloco {
namespace {

// 128 bits from the kernel's CSPRNG, as 32 hex digits.
std::string NewKey() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    const ssize_t r = getrandom(raw + got, sizeof raw - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (errno != EINTR) {  // no getrandom (old kernel, seccomp): the device instead
      std::FILE* f = std::fopen("/dev/urandom", "rb");
      const bool ok = f && std::fread(raw, 1, sizeof raw, f) == sizeof raw;
      if (f) std::fclose(f);
      if (!ok) {
        LogError("server", "no source of randomness for session keys (getrandom, /dev/urandom)");
        std::abort();  // the host, not a peer: serving with guessable keys would be worse
      }
      got = sizeof raw;
    }
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
}

// Compares without an early exit, so timing does not tell how much of a key was right.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseTokenFile(absl::string_view text,
                                                                 std::map<std::string, float>* weights) {
  std::map<std::string, std::string> tokens;
  std::map<std::string, float> weight_of;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    float weight = 1;
    if (f.size() == 3 && absl::ConsumePrefix(&f[2], "weight=")) {
      if (!absl::SimpleAtof(f[2], &weight) || !(weight > 0) || !(weight <= 1000)) {
        return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": weight must be in (0, 1000]"));
      }
      f.pop_back();
    }
    if (f.size() != 2) return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": want LABEL TOKEN [weight=W]"));
    if (f[1].size() < 16) return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": token shorter than 16 characters"));
    const std::string label = SafeName(std::string(f[0]));
    if (!tokens.emplace(std::string(f[1]), label).second) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": token listed twice"));
    }
    auto [it, fresh] = weight_of.emplace(label, weight);
    if (!fresh && it->second != weight) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": label ", label, " given two weights"));
    }
  }
  if (weights != nullptr) *weights = std::move(weight_of);
  return tokens;
}

absl::StatusOr<std::unique_ptr<Auth>> Auth::Create(AuthOptions options, const Clock* clock) {
  if (options.token_file.empty() && !options.open_join) {
    return absl::InvalidArgumentError("give --join_tokens=FILE, or --open_join to let anyone join");
  }
  std::unique_ptr<Auth> auth(new Auth(std::move(options), clock));
  if (!auth->options_.token_file.empty()) {
    if (absl::Status s = auth->Reload(true); !s.ok()) return s;
  }
  return auth;
}

absl::Status Auth::Reload(bool force) {
  const std::string& path = options_.token_file;
  if (path.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    absl::MutexLock lock(&mu_);
    ++stats_.token_reload_errors;
    return absl::InvalidArgumentError(absl::StrCat("cannot read token file ", path));
  }
  const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  {
    absl::MutexLock lock(&mu_);
    if (!force && mtime == file_mtime_ns_ && st.st_size == file_size_) return absl::OkStatus();
    file_mtime_ns_ = mtime;
    file_size_ = st.st_size;
  }
  absl::StatusOr<std::string> text = ReadFile(path);
  struct stat after;
  if (stat(path.c_str(), &after) != 0 || after.st_size != st.st_size ||
      after.st_mtim.tv_sec != st.st_mtim.tv_sec || after.st_mtim.tv_nsec != st.st_mtim.tv_nsec) {
    absl::MutexLock lock(&mu_);
    file_mtime_ns_ = -1;  // caught mid-write: read it again next time
    return absl::UnavailableError(absl::StrCat("token file ", path, " changed while being read; retrying"));
  }
  std::map<std::string, float> weights;
  absl::StatusOr<std::map<std::string, std::string>> parsed =
      text.ok() ? ParseTokenFile(*text, &weights) : absl::StatusOr<std::map<std::string, std::string>>(text.status());
  if (parsed.ok() && parsed->empty() && !options_.open_join) {
    // Most likely a file caught truncated; revoking everyone takes a restart instead.
    parsed = absl::InvalidArgumentError("no tokens in it (without --open_join nobody could join)");
  }
  absl::MutexLock lock(&mu_);
  if (!parsed.ok()) {
    ++stats_.token_reload_errors;
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": ", parsed.status().message()));
  }
  const bool first = stats_.token_reloads++ == 0;
  tokens_ = *std::move(parsed);
  weights_ = std::move(weights);
  Logf("server", "%s %zu join tokens from %s", first ? "loaded" : "reloaded", tokens_.size(), path.c_str());
  return absl::OkStatus();
}

bool Auth::RateOk(std::deque<double>* joins, size_t per_minute, double now) {
  while (!joins->empty() && now - joins->front() > 60) joins->pop_front();
  return joins->size() < per_minute;
}

absl::StatusOr<std::string> Auth::Admit(const std::string& token) {
  absl::MutexLock lock(&mu_);
  std::string label = "open";
  if (!options_.open_join || !token.empty()) {
    if (token.empty()) {
      ++stats_.refused_no_token;
      return absl::UnauthenticatedError("this server needs a join token");
    }
    auto it = tokens_.find(token);
    if (it == tokens_.end()) {
      ++stats_.refused_bad_token;
      return absl::PermissionDeniedError("unknown or revoked join token");
    }
    label = it->second;
  }
  const double now = clock_->Now();
  size_t of_token = reserved_[token];  // admitted, session not yet open
  for (const auto& [id, s] : sessions_) of_token += s.token == token;
  std::deque<double>& token_joins = token_joins_[token];
  const char* limit = sessions_.size() + reserved_total_ >= options_.max_workers ? "live workers"
                      : !token.empty() && of_token >= options_.max_workers_per_token ? "live workers of this token"
                      : !RateOk(&joins_, options_.max_joins_per_minute, now) ? "joins per minute"
                      : !RateOk(&token_joins, options_.max_joins_per_token_per_minute, now)
                          ? "joins per minute of this token"
                          : nullptr;
  if (limit) {
    ++stats_.refused_join_limit;
    return absl::ResourceExhaustedError(absl::StrCat("join refused: limit of ", limit, " reached; retry later"));
  }
  joins_.push_back(now);
  token_joins.push_back(now);
  ++reserved_[token];
  ++reserved_total_;
  return label;
}

void Auth::UnreserveLocked(const std::string& token) {
  auto reserved = reserved_.find(token);
  if (reserved != reserved_.end() && reserved->second > 0) {
    if (--reserved->second == 0) reserved_.erase(reserved);
    --reserved_total_;
  }
}

void Auth::Release(const std::string& token) {
  absl::MutexLock lock(&mu_);
  UnreserveLocked(token);
}

std::string Auth::Open(uint64_t worker_id, const std::string& token) {
  absl::MutexLock lock(&mu_);
  UnreserveLocked(token);
  Session& s = sessions_[worker_id];
  s.key = NewKey();
  s.token = token;
  return s.key;
}

absl::Status Auth::Check(uint64_t worker_id, absl::string_view key, bool* revoked) {
  *revoked = false;
  absl::MutexLock lock(&mu_);
  if (key.empty()) {
    ++stats_.refused_bad_session;
    return absl::UnauthenticatedError("call without a session key (metadata muloco-session); join first");
  }
  auto it = sessions_.find(worker_id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  if (!SameSecret(key, it->second.key)) {
    ++stats_.refused_bad_session;
    return absl::PermissionDeniedError(absl::StrCat("wrong session key for worker ", worker_id));
  }
  if (!it->second.token.empty() && !tokens_.count(it->second.token)) {
    ++stats_.refused_revoked;
    sessions_.erase(it);
    *revoked = true;
    return absl::PermissionDeniedError("join token revoked");
  }
  return absl::OkStatus();
}

void Auth::Close(uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(worker_id);
}

Auth::Stream::~Stream() {
  if (!auth_) return;
  absl::MutexLock lock(&auth_->mu_);
  auto it = auth_->sessions_.find(id_);
  if (it != auth_->sessions_.end() && it->second.streams > 0) --it->second.streams;
}

absl::StatusOr<Auth::Stream> Auth::BeginStream(uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(worker_id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  if (it->second.streams >= options_.max_streams_per_worker) {
    ++stats_.refused_stream_limit;
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", worker_id, " has ", it->second.streams, " calls in flight already"));
  }
  ++it->second.streams;
  return Stream(this, worker_id);
}

absl::Status Auth::CountPush(uint64_t worker_id, uint64_t round) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(worker_id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id, "; join again"));
  Session& s = it->second;
  if (s.push_round != round) s.push_round = round, s.push_attempts = 0;
  if (++s.push_attempts > options_.max_push_attempts_per_round) {
    ++stats_.refused_push_limit;
    return absl::ResourceExhaustedError(absl::StrCat("more than ", options_.max_push_attempts_per_round,
                                                     " pushes for round ", round));
  }
  return absl::OkStatus();
}

float Auth::WeightOf(const std::string& label) const {
  absl::MutexLock lock(&mu_);
  auto it = weights_.find(label);
  return it == weights_.end() ? 1.0f : it->second;
}

AuthStats Auth::Stats() const {
  absl::MutexLock lock(&mu_);
  AuthStats s = stats_;
  s.sessions = sessions_.size();
  s.tokens = tokens_.size();
  return s;
}

}  // namespace muloco
