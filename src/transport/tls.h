// TLS for every TCP connection of a cluster that asks for it (Unix sockets stay plaintext: they
// never leave the host and only their owner may open them).
//
// A process's TLS material lives in one directory (TROUPE_TLS_DIR):
//   ca.pem              the cluster's CA: every peer's certificate must be signed by it
//   ca.key              the CA's key (optional): with it, a process makes its own certificate
//   NAME.pem, NAME.key  this process's certificate and key; NAME is TROUPE_TLS_NAME, else the
//                       host name. Missing ones are made and signed with ca.key when it is there.
// Users who bring their own certificates put ca.pem, NAME.pem and NAME.key there and no ca.key.
//
// Both ends present a certificate and check the other's against the CA (mutual TLS 1.3); names
// in certificates are not checked: the HMAC token handshake (handshake.h) runs inside the
// encrypted stream as before and proves the peer belongs to this cluster.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace asio::ssl {
class context;
}  // namespace asio::ssl

namespace troupe::transport {

struct TlsSettings {
  std::string dir;   // holds ca.pem and NAME.pem/NAME.key (or ca.key to make them)
  std::string name;  // the certificate's file name; empty: the host name
};

// Makes `dir` (0700) with a new cluster CA, ca.pem and ca.key (0600), unless ca.pem is already
// there. Throws Error(kResourceUnavailable) when a file cannot be written.
void make_cluster_ca(const std::string& dir);

// Makes dir/NAME.pem and dir/NAME.key signed with dir/ca.key unless NAME.pem is there. Safe to
// run from several processes at once (each writes a temporary file and renames it). Throws
// Error(kInvalidArgument) for a bad name, Error(kInvalidArgument) too when the certificate is
// missing and there is no ca.key to make one.
void ensure_certificate(const std::string& dir, const std::string& name);

// The settings from TROUPE_TLS_DIR and TROUPE_TLS_NAME; nullopt when TROUPE_TLS_DIR is unset.
std::optional<TlsSettings> tls_settings_from_environment();

// Replaces this process's TLS settings (nullopt: TLS off). The TCP connections opened or
// accepted afterwards use them; open ones keep theirs. Loads (and makes, see above) the
// certificate at once, so a bad directory fails here. Thread-safe. Throws Error.
void configure_tls(std::optional<TlsSettings> settings);

// The context every new TCP connection uses: the one configure_tls set, else (once, at first
// use) the environment's. Null when TLS is off. Thread-safe. Throws Error when the environment
// names a directory that cannot be used.
std::shared_ptr<asio::ssl::context> tls_context();

// The directory of the settings in use ("" when TLS is off), for the processes this one starts.
std::string tls_dir();
std::string tls_name();

}  // namespace troupe::transport
