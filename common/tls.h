// Transport credentials from PEM files, for the server and the worker. TLS is the default:
// plaintext only when `insecure` is asked for explicitly (tests, a local demo).
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace muloco {

struct ServerTls {
  bool insecure = false;   // plaintext (a warning is logged)
  std::string cert, key;   // the server's certificate chain and private key (PEM files)
  std::string client_ca;   // set: mutual TLS, clients must present a certificate this CA signed
};

struct ClientTls {
  bool insecure = false;   // plaintext
  std::string ca;          // CA that signed the server's certificate (empty: the system's roots)
  std::string cert, key;   // client certificate and key, for servers that require mutual TLS
};

// INVALID_ARGUMENT naming the flag when a file is missing or the combination is incomplete.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerTls& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientTls& tls);

}  // namespace muloco
