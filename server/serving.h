// The gRPC server of a run, behind the connection gate: gRPC listens on a private Unix
// socket (a fresh 0700 directory) and the gate (server/conn_gate.h) takes the public
// address, so connections are capped before any TLS handshake. A "unix:" listen address is
// served by gRPC directly.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/conn_gate.h"

namespace muloco {

struct ServingOptions {
  std::string listen;                         // public address
  uint32_t max_connections = 1024;            // the gate's caps (conn_gate.h)
  uint32_t max_connections_per_address = 64;
  uint32_t max_threads = 4096;                // gRPC handler threads at most
  uint32_t transport_memory_mb = 256;         // memory gRPC's transport may hold for incoming data
  int max_message_bytes = 4 << 20;            // largest incoming message
};

class Serving {
 public:
  static absl::StatusOr<std::unique_ptr<Serving>> Start(const ServingOptions& o,
                                                        std::shared_ptr<grpc::ServerCredentials> creds,
                                                        grpc::Service* service);
  ~Serving();  // shuts gRPC down (if not yet), closes the gate, removes the socket

  int port() const { return port_; }
  grpc::Server* server() { return server_.get(); }
  GateStats Gate() const { return gate_ ? gate_->Stats() : GateStats{}; }

 private:
  Serving() = default;
  std::string socket_dir_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ConnectionGate> gate_;
  int port_ = 0;
};

}  // namespace muloco
