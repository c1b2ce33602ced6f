// ServerClient: gRPC calls with deadlines; streams reassembled and validated.
#include "worker/client.h"

#include <grpcpp/create_channel.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "codec/checksum.h"
#include "common/file_io.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "worker/retry.h"

namespace muloco {

ServerClient::ServerClient(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                           ClientOptions options)
    : address_(address), options_(options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // After a cut, reconnect within seconds (gRPC's default backoff grows to 2 minutes); the
  // worker's own retry loop paces the calls. (MIN_RECONNECT_BACKOFF is also gRPC's connect
  // timeout, so a handshake behind more than ~2 s of queueing fails and is retried; raising
  // it to 5 s or 20 s kept a worker from ever reconnecting after a cut link came back in
  // test_fault_tolerance, so it stays short.) Keepalive pings find silently dead links; their
  // timeout also bounds unacknowledged data (TCP_USER_TIMEOUT), so it must exceed a slow
  // link's queueing delay: 20 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  channel_ = grpc::CreateCustomChannel(address, std::move(credentials), args);
  stub_ = v1::Muloco::NewStub(channel_);
}

namespace {

// Cancels a streaming call that moves no chunk for stall_s (see ClientOptions).
class StallGuard {
 public:
  StallGuard(grpc::ClientContext* ctx, double stall_s) : ctx_(ctx), stall_s_(stall_s), thread_([this] { Watch(); }) {}
  ~StallGuard() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    cv_.SignalAll();
    thread_.join();
  }
  void Progress() {
    absl::MutexLock lock(&mu_);
    ++moves_;
    cv_.SignalAll();
  }
  // Stops watching: what is left (a push's buffered tail, then the reply) moves without
  // marks this side can see; a dead link still ends the call through keepalive.
  void Stop() {
    absl::MutexLock lock(&mu_);
    done_ = true;
    cv_.SignalAll();
  }
  // UNAVAILABLE (retried; a fetch resumes where it stopped) when the call was cancelled for
  // stalling; `s` otherwise.
  absl::Status Explain(absl::Status s) {
    absl::MutexLock lock(&mu_);
    if (!stalled_ || s.ok()) return s;
    return absl::UnavailableError(absl::StrCat("no progress for ", stall_s_, " s (stalled link)"));
  }

 private:
  void Watch() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (uint64_t seen = moves_;; seen = moves_) {
      const absl::Time deadline = absl::Now() + absl::Seconds(stall_s_);
      while (!done_ && moves_ == seen) {
        if (cv_.WaitWithDeadline(&mu_, deadline) && !done_ && moves_ == seen) {  // timed out, nothing moved
          stalled_ = true;
          ctx_->TryCancel();
          return;
        }
      }
      if (done_) return;
    }
  }

  grpc::ClientContext* const ctx_;
  const double stall_s_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  uint64_t moves_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;   // last: starts once the fields above exist
};

// Streams are bounded by StallGuard; this cap only keeps a call from living forever.
constexpr double kStreamCapS = 7 * 24 * 3600.0;

}  // namespace

void ServerClient::SetSession(uint64_t worker_id, const std::string& key) {
  absl::MutexLock lock(&session_mu_);
  session_id_ = std::to_string(worker_id);
  session_key_ = key;
}

void ServerClient::Prepare(grpc::ClientContext& ctx, double timeout_s) const {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  absl::MutexLock lock(&session_mu_);
  if (session_key_.empty()) return;
  ctx.AddMetadata("muloco-worker", session_id_);
  ctx.AddMetadata("muloco-session", session_key_);
}

void ServerClient::Pause(double s) {
  const auto end = std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                          std::chrono::duration<double>(s));
  // WaitForConnected polls the channel until it is READY (asking it to connect) or `end`.
  if (channel_->WaitForConnected(end)) std::this_thread::sleep_until(end);
}

absl::StatusOr<v1::JoinResponse> ServerClient::Join(const std::string& name, const std::string& token,
                                                    const v1::ModelLayout& model) {
  grpc::ClientContext ctx;
  Prepare(ctx, options_.call_timeout_s);
  v1::JoinRequest req;
  req.set_name(name);
  req.set_protocol_version(1);
  req.set_token(token);
  *req.mutable_layout() = model;
  v1::JoinResponse resp;
  grpc::Status s = stub_->Join(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  SetSession(resp.worker_id(), resp.session_key());
  return resp;
}

// One FetchModel stream from m->params[filled...]; appends what arrives, checking every chunk.
// Returns OK at the end of the model; on a cut, the caller resumes from *filled.
absl::Status ServerClient::FetchFrom(uint64_t worker_id, FetchedModel* m, size_t* filled, double stall_s) {
  grpc::ClientContext ctx;
  Prepare(ctx, kStreamCapS);
  StallGuard guard(&ctx, stall_s);
  v1::FetchModelRequest req;
  req.set_worker_id(worker_id);
  req.set_offset(*filled);
  auto reader = stub_->FetchModel(&ctx, req);
  v1::ModelChunk chunk;
  while (reader->Read(&chunk)) {
    guard.Progress();
    if (*filled == 0 && chunk.offset() == 0) {  // (re)starting: take this snapshot's identity
      m->round = chunk.round();
      m->checksum = chunk.model_checksum();
      if (chunk.num_params() > (size_t{1} << 34)) return absl::DataLossError("model: absurd parameter count");
      m->params.resize(chunk.num_params());
    }
    if (chunk.round() != m->round || chunk.model_checksum() != m->checksum) {
      *filled = 0;  // the model moved on between attempts: start over
      return absl::AbortedError("model changed during a resumed fetch");
    }
    const size_t count = chunk.data().size() / sizeof(float);
    if (chunk.num_params() != m->params.size() || chunk.data().size() % sizeof(float) || chunk.offset() != *filled ||
        count > m->params.size() - *filled) {
      return absl::DataLossError("model stream: inconsistent chunk");
    }
    if (Checksum64(chunk.data().data(), chunk.data().size()) != chunk.chunk_checksum()) {
      return absl::DataLossError("model chunk checksum mismatch");  // resume re-fetches from here
    }
    std::memcpy(m->params.data() + *filled, chunk.data().data(), chunk.data().size());
    *filled += count;
  }
  return guard.Explain(FromGrpcStatus(reader->Finish()));
}

absl::StatusOr<FetchedModel> ServerClient::FetchModel(uint64_t worker_id) {
  FetchedModel m;
  size_t filled = 0;
  // After a stall the link first drains what the cancelled attempts left queued: each
  // attempt that moves nothing gets twice the patience (up to 16x), reset once data flows.
  double stall_s = options_.stall_timeout_s;
  Backoff backoff;
  for (int attempt = 0;; ++attempt) {
    const size_t before = filled;
    absl::Status s = FetchFrom(worker_id, &m, &filled, stall_s);
    if (s.ok() && !m.params.empty() && filled == m.params.size()) break;
    if (s.ok()) s = absl::DataLossError("model stream ended early");
    const bool retry = s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDataLoss ||
                       s.code() == absl::StatusCode::kAborted;
    if (!retry || attempt >= options_.fetch_attempts) return s;
    stall_s = filled > before ? options_.stall_timeout_s : std::min(stall_s * 2, 16 * options_.stall_timeout_s);
    LogWarn("client", "model fetch: %s; resuming at parameter %zu (attempt %d of %d)",
            std::string(s.message()).c_str(), filled, attempt + 1, options_.fetch_attempts);
    if (filled > before) backoff.Reset();
    Pause(backoff.Next(s.code()));
  }
  if (ParamChecksum(m.params.data(), m.params.size()) != m.checksum) {
    return absl::DataLossError("model checksum mismatch");
  }
  return m;
}

absl::Status ServerClient::Push(uint64_t worker_id, uint64_t round, const std::string& payload, const PushNote& note) {
  const uint64_t checksum = Checksum64(payload.data(), payload.size(), /*seed=*/round);  // binds it to the round
  const std::pair<uint64_t, uint64_t> push{round, checksum};
  size_t offset = 0;
  if (cut_push_ == push) {  // the last try of this very push was cut: ask what the server kept
    grpc::ClientContext ctx;
    Prepare(ctx, 10);
    v1::PushProgressRequest req;
    req.set_worker_id(worker_id);
    req.set_round(round);
    req.set_payload_checksum(checksum);
    v1::PushProgressReply reply;
    if (stub_->PushProgress(&ctx, req, &reply).ok() && reply.received_bytes() < payload.size()) {
      offset = reply.received_bytes();
    }
    if (offset > 0) {
      LogWarn("client", "push for round %llu: resuming at byte %zu of %zu", static_cast<unsigned long long>(round), offset,
              payload.size());
    }
  }
  absl::Status s = PushFrom(worker_id, round, payload, checksum, offset, note);
  if (s.code() == absl::StatusCode::kAborted && offset > 0) {  // the server no longer holds it: start over
    s = PushFrom(worker_id, round, payload, checksum, 0, note);
  }
  const bool cut = s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kCancelled ||
                   s.code() == absl::StatusCode::kDeadlineExceeded;
  cut_push_ = cut ? push : std::pair<uint64_t, uint64_t>{};
  return s;
}

absl::Status ServerClient::PushFrom(uint64_t worker_id, uint64_t round, const std::string& payload, uint64_t checksum,
                                    size_t offset, const PushNote& note) {
  grpc::ClientContext ctx;
  Prepare(ctx, kStreamCapS);
  StallGuard guard(&ctx, options_.stall_timeout_s);
  v1::PushReply reply;
  auto writer = stub_->PushUpdate(&ctx, &reply);
  do {
    v1::UpdateChunk chunk;
    chunk.set_worker_id(worker_id);
    chunk.set_round(round);
    chunk.set_total_bytes(payload.size());
    chunk.set_train_loss(note.train_loss);
    chunk.set_inner_steps(note.inner_steps);
    chunk.set_offset(offset);
    chunk.set_payload_checksum(checksum);
    const size_t count = std::min(options_.chunk_bytes, payload.size() - offset);
    chunk.set_data(payload.data() + offset, count);
    offset += count;
    if (!writer->Write(chunk)) break;  // the server ended the call; Finish() says why
    guard.Progress();
  } while (offset < payload.size());
  guard.Stop();
  writer->WritesDone();
  return guard.Explain(FromGrpcStatus(writer->Finish()));
}

absl::StatusOr<RoundResult> ServerClient::AwaitRound(uint64_t worker_id, uint64_t round) {
  // The server answers DEADLINE_EXCEEDED after its --max_await_s while the round is still
  // open (so no call holds its thread long): ask again. An evicted worker hears NOT_FOUND,
  // a dead server shows as UNAVAILABLE.
  for (;;) {
    absl::StatusOr<RoundResult> r = AwaitOnce(worker_id, round);
    if (r.status().code() != absl::StatusCode::kDeadlineExceeded) return r;
  }
}

void ServerClient::CancelAwaits() {
  absl::MutexLock lock(&await_mu_);
  awaits_cancelled_ = true;
  if (await_ctx_ != nullptr) await_ctx_->TryCancel();
}

absl::StatusOr<RoundResult> ServerClient::AwaitOnce(uint64_t worker_id, uint64_t round) {
  grpc::ClientContext ctx;
  Prepare(ctx, options_.call_timeout_s);
  {
    absl::MutexLock lock(&await_mu_);
    if (awaits_cancelled_) return absl::CancelledError("AwaitRound cancelled: the worker is stopping");
    await_ctx_ = &ctx;
  }
  struct Unregister {
    ServerClient* client;
    ~Unregister() {
      absl::MutexLock lock(&client->await_mu_);
      client->await_ctx_ = nullptr;
    }
  } unregister{this};
  v1::AwaitRoundRequest req;
  req.set_worker_id(worker_id);
  req.set_round(round);
  auto reader = stub_->AwaitRound(&ctx, req);
  RoundResult r;
  v1::RoundChunk chunk;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) {
      r.round = chunk.round();
      r.next_round = chunk.next_round();
      r.checksum = chunk.model_checksum();
      r.contributors = chunk.contributors();
      r.done = chunk.done();
      if (chunk.total_bytes() > (size_t{1} << 36)) return absl::DataLossError("round: absurd payload size");
      r.payload.reserve(chunk.total_bytes());
      for (const v1::LandedRange& l : chunk.landed()) r.landed.push_back(LandedRange{l.offset(), l.count(), l.fraction()});
      r.mine = chunk.caller_pushed();
      first = false;
    }
    if (chunk.round() != r.round || chunk.data().size() > chunk.total_bytes() - r.payload.size()) {
      return absl::DataLossError("round stream: inconsistent chunk");
    }
    r.payload.append(chunk.data());
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FromGrpcStatus(s);
  if (first || r.round != round || r.payload.size() != chunk.total_bytes()) {
    return absl::DataLossError("round stream ended early");
  }
  return r;
}

// A short unary call carrying the worker id (Heartbeat, Leave) with a deadline of
// `deadline_s`; `fill` adds the rest of the request.
template <typename Request, typename Reply, typename Call>
absl::Status ServerClient::ShortCall(Call call, uint64_t worker_id, double deadline_s,
                                     const std::function<void(Request*)>& fill, Reply* reply) {
  grpc::ClientContext ctx;
  Prepare(ctx, deadline_s);
  Request req;
  req.set_worker_id(worker_id);
  if (fill) fill(&req);
  Reply ignored;
  return FromGrpcStatus((stub_.get()->*call)(&ctx, req, reply != nullptr ? reply : &ignored));
}

absl::StatusOr<uint32_t> ServerClient::Heartbeat(uint64_t worker_id, const v1::WorkerReport& report) {
  v1::HeartbeatReply reply;
  absl::Status s = ShortCall<v1::HeartbeatRequest, v1::HeartbeatReply>(
      &v1::Muloco::Stub::Heartbeat, worker_id, options_.heartbeat_timeout_s,
      [&](v1::HeartbeatRequest* req) { *req->mutable_report() = report; }, &reply);
  if (!s.ok()) return s;
  return reply.inner_steps();
}

absl::Status ServerClient::Leave(uint64_t worker_id) {
  return ShortCall<v1::LeaveRequest, v1::LeaveReply>(&v1::Muloco::Stub::Leave, worker_id, 10);
}

ClientOptions ClientOptionsFor(const WorkerOptions& o) {
  ClientOptions c;
  c.tls_server_name = o.tls_server_name;
  c.stall_timeout_s = o.stall_timeout_s;
  c.chunk_bytes = o.chunk_bytes;
  c.heartbeat_timeout_s = std::min(10.0, o.heartbeat_s);
  return c;
}

absl::StatusOr<std::string> ReadJoinToken(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  std::string token;
  if (text.ok()) token = std::string(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token_file=", path, ": cannot read a token there"));
  return token;
}

}  // namespace muloco
