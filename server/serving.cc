// Serving (see serving.h): gRPC's settings for the run's server and the gate in front of it.
#include "server/serving.h"

#include <grpcpp/resource_quota.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace muloco {

absl::StatusOr<std::unique_ptr<Serving>> Serving::Start(const ServingOptions& o,
                                                        std::shared_ptr<grpc::ServerCredentials> creds,
                                                        grpc::Service* service) {
  std::unique_ptr<Serving> s(new Serving());
  const bool gated = !absl::StartsWith(o.listen, "unix:");
  std::string address = o.listen;
  GateOptions g{o.listen, "", o.max_connections, o.max_connections_per_address};
  if (gated) {
    // An admitted connection holds three descriptors here (the client's, both ends of the
    // Unix connection to gRPC); keep room for the rest.
    const uint64_t limit = RaiseDescriptorLimit();
    const uint64_t room = limit > 640 ? (limit - 256) / 3 : 128;
    if (g.max_connections > room) {
      Logf("server", "--max_connections=%u lowered to %llu: this process may open %llu files (ulimit -n)",
           g.max_connections, static_cast<unsigned long long>(room), static_cast<unsigned long long>(limit));
      g.max_connections = static_cast<uint32_t>(room);
    }
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/muloco-server.XXXXXX");
    std::vector<char> buf(dir.begin(), dir.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp ", dir, ": failed"));
    s->socket_dir_ = buf.data();
    g.inner_socket = s->socket_dir_ + "/grpc.sock";
    address = "unix:" + g.inner_socket;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, std::move(creds), &port);
  // Idle streams hold a thread each (sync API): cap them; past the cap calls get RESOURCE_EXHAUSTED.
  grpc::ResourceQuota quota("muloco-server");
  quota.SetMaxThreads(static_cast<int>(std::max<uint32_t>(8, o.max_threads)));
  // gRPC 1.51 buffers a whole incoming message before checking its size (grpc/grpc#43012):
  // the quota bounds what its transport may hold; past it, streams are reset.
  quota.Resize(size_t{o.transport_memory_mb} << 20);
  builder.SetResourceQuota(quota);
  builder.RegisterService(service);
  // Workers ping every 10 s to notice dead links; let them, even between calls.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  // A connection that starts a TLS handshake and never finishes it is dropped after 10 s
  // (gRPC's default is 120 s); the gate closes one that never starts.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10000);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  s->port_ = port;
  if (gated) {
    absl::StatusOr<std::unique_ptr<ConnectionGate>> gate = ConnectionGate::Start(g);
    if (!gate.ok()) return gate.status();
    s->gate_ = *std::move(gate);
    s->port_ = s->gate_->port();
  }
  return s;
}

Serving::~Serving() {
  gate_.reset();  // no new bytes reach gRPC
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
  if (!socket_dir_.empty()) {
    unlink((socket_dir_ + "/grpc.sock").c_str());
    rmdir(socket_dir_.c_str());
  }
}

}  // namespace muloco
