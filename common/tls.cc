// Transport credentials (see tls.h).
#include "common/tls.h"

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/log.h"

namespace muloco {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok() || text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": cannot read a PEM file there"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerTls& tls) {
  if (tls.insecure) {
    if (!tls.cert.empty() || !tls.client_ca.empty()) {
      return absl::InvalidArgumentError("--insecure contradicts --tls_cert / --tls_client_ca");
    }
    LogWarn("server", "--insecure: plaintext gRPC, anyone on the path can read and forge traffic");
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert.empty() || tls.key.empty()) {
    return absl::InvalidArgumentError("give --tls_cert and --tls_key (TLS), or --insecure for plaintext");
  }
  grpc::SslServerCredentialsOptions opts(tls.client_ca.empty()
                                             ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  absl::StatusOr<std::string> cert = ReadPem(tls.cert, "tls_cert"), key = ReadPem(tls.key, "tls_key");
  if (!cert.ok()) return cert.status();
  if (!key.ok()) return key.status();
  opts.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(tls.client_ca, "tls_client_ca");
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientTls& tls) {
  if (tls.insecure) {
    if (!tls.ca.empty() || !tls.cert.empty()) return absl::InvalidArgumentError("--insecure contradicts --tls_ca / --tls_cert");
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert.empty() != tls.key.empty()) return absl::InvalidArgumentError("give both --tls_cert and --tls_key, or neither");
  grpc::SslCredentialsOptions opts;
  if (!tls.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(tls.ca, "tls_ca");
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
  }
  if (!tls.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(tls.cert, "tls_cert"), key = ReadPem(tls.key, "tls_key");
    if (!cert.ok()) return cert.status();
    if (!key.ok()) return key.status();
    opts.pem_cert_chain = *cert;
    opts.pem_private_key = *key;
  }
  return grpc::SslCredentials(opts);
}

}  // namespace muloco
