// ConnectionGate: the server's TCP front. It accepts on the public address, caps connections
// in all and per source address before a byte reaches gRPC (so before any TLS handshake),
// and relays each admitted connection, byte for byte, to gRPC listening on a private Unix
// socket. gRPC 1.51 has no connection cap of its own: without this, raw connections that
// never speak exhausted the server's file descriptors and new workers could not join.
//
// Policy (one relay thread, epoll):
// - A connection over a cap takes the place of an unsettled one in the same scope (the
//   whole server, or its source address): the one whose client has sent the fewest bytes,
//   the oldest among equals. Settled connections (their client sent >= kSettledBytes: a
//   worker that joined and pushed) are never displaced; with none to displace, the newcomer
//   is closed at once.
// - A connection whose client sends nothing within silent_close_s is closed; gRPC's own
//   handshake timeout (run_server.cc) ends one that starts but never finishes TLS.
// - The inner connection to gRPC is opened on the client's first byte, so a silent
//   connection costs one descriptor and no gRPC thread.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace muloco {

struct GateOptions {
  std::string listen;                         // public host:port (port 0 picks a free port)
  std::string inner_socket;                   // gRPC's Unix socket path
  uint32_t max_connections = 1024;            // open client connections at most
  uint32_t max_connections_per_address = 64;  // per IPv4 address or IPv6 /64
  double silent_close_s = 10;                 // close a connection whose client sent nothing this long
};

struct GateStats {
  uint64_t open = 0;                  // client connections open now
  uint64_t accepted = 0;              // admitted since start
  uint64_t refused_total = 0;         // closed at accept: the server's cap, nothing to displace
  uint64_t refused_per_address = 0;   // closed at accept: the address's cap, nothing to displace
  uint64_t displaced = 0;             // unsettled connections closed to admit a newcomer
  uint64_t silent_closed = 0;         // closed for sending nothing in silent_close_s
};

class ConnectionGate {
 public:
  // The client bytes after which a connection is settled (never displaced).
  static constexpr uint64_t kSettledBytes = 64 << 10;

  // Binds the public address and starts relaying. Fails (with the reason) when the address
  // cannot be bound or the options are out of range.
  static absl::StatusOr<std::unique_ptr<ConnectionGate>> Start(const GateOptions& options);
  ~ConnectionGate();  // closes every connection and stops the relay thread

  int port() const { return port_; }
  GateStats Stats() const;

 private:
  struct Relay;
  explicit ConnectionGate(std::unique_ptr<Relay> relay, int port);

  std::unique_ptr<Relay> relay_;
  int port_;
  std::thread thread_;
};

// Source-address key for the per-address cap: the IPv4 address, or the IPv6 /64 prefix
// (an IPv4-mapped IPv6 address counts as its IPv4 address).
std::string AddressKey(const sockaddr_storage& addr);

// Raises the soft file-descriptor limit to the hard one; returns the soft limit now.
uint64_t RaiseDescriptorLimit();

}  // namespace muloco
