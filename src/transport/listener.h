// Listening for and opening authenticated connections.
//
// Endpoints are strings: "unix:/path/to.sock" or "tcp:ADDRESS:PORT" (port 0 binds any free
// port; endpoint() then reports the bound one). TCP listeners bind exactly the given address:
// loopback unless told otherwise.
#pragma once

#include <asio/basic_socket_acceptor.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "transport/connection.h"
#include "transport/handshake.h"

namespace troupe::transport {

using Acceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol>;

// Parses an endpoint string; throws Error(kInvalidArgument).
asio::generic::stream_protocol::endpoint parse_endpoint(const std::string& endpoint);

constexpr std::chrono::milliseconds kDefaultHandshakeTimeout{10000};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // Binds and starts accepting on `io`'s thread. Every accepted connection runs the server
  // handshake; authenticated ones are passed to `on_connection` on the I/O thread, which must
  // install handlers. Throws Error if the endpoint cannot be bound. A stale Unix socket file is
  // replaced.
  static std::shared_ptr<Listener> start(
      asio::io_context& io, const std::string& endpoint, std::string token,
      AuthenticatedHandler on_connection,
      std::chrono::milliseconds handshake_timeout = kDefaultHandshakeTimeout);
  ~Listener();
  // The bound endpoint, with the real port.
  const std::string& endpoint() const { return endpoint_; }
  // Stops accepting; removes a Unix socket file. Thread-safe, idempotent.
  void close();

 private:
  Listener(asio::io_context& io, std::string token, AuthenticatedHandler on_connection,
           std::chrono::milliseconds handshake_timeout);
  void accept_next();

  asio::io_context& io_;
  Acceptor acceptor_;
  std::string endpoint_;
  std::string unix_path_;
  std::string token_;
  AuthenticatedHandler on_connection_;
  std::chrono::milliseconds handshake_timeout_;
};

// Connects to `endpoint` and authenticates. Calls `done` once on the I/O thread with the
// connection (handlers not yet installed) or an error; the error names the endpoint.
void async_connect(asio::io_context& io, const std::string& endpoint, const std::string& token,
                   std::chrono::milliseconds timeout, ClientDoneHandler done);

}  // namespace troupe::transport
