// Listening for and opening authenticated connections.
//
// Endpoints are strings: "unix:/path/to.sock" or "tcp:ADDRESS:PORT" (port 0 binds any free
// port; endpoint() then reports the bound one). TCP listeners bind exactly the given address:
// loopback unless told otherwise.
#pragma once

#include <asio/basic_socket_acceptor.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "transport/connection.h"
#include "transport/handshake.h"

namespace troupe::transport {

using Acceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol>;

// Parses an endpoint string; throws Error(kInvalidArgument).
asio::generic::stream_protocol::endpoint parse_endpoint(const std::string& endpoint);

// A real client answers the challenge within one round trip; a peer that has not after this
// long is closed.
constexpr std::chrono::milliseconds kDefaultHandshakeTimeout{5000};
constexpr size_t kDefaultMaxPendingHandshakes = 256;

struct ListenerOptions {
  std::chrono::milliseconds handshake_timeout = kDefaultHandshakeTimeout;
  // LST-1: at most this many accepted connections are in the handshake at once (at least 1).
  size_t max_pending_handshakes = kDefaultMaxPendingHandshakes;
};

// Cost before authentication is bounded (LST-1 above; CONN-1 in connection.h for the buffers),
// and no unauthenticated peer can keep others out:
// LST-4: a connection accepted while max_pending_handshakes are pending is admitted, and one
// pending handshake is evicted (closed) in its place: the oldest one from the source address
// (TCP: the peer's IP address; all Unix peers are one source) that holds the most pending
// handshakes, the new connection counted with its source. So a flood from one address evicts
// only its own connections while another address has fewer pending, and a client from the
// flooding address itself is evicted only after max_pending_handshakes - 1 newer connections
// from there were accepted, while it needs one round trip. Every eviction is counted
// (evicted_handshakes()) and logged under LST-3's rate limit ("evicted from the handshake").
// LST-2: when accept fails (out of descriptors or memory), the listener waits before it tries
// again, 10 ms doubling up to 500 ms, and resets the wait after an accept succeeds.
// LST-3: the lines a peer can cause before it authenticates (refused connections, failed
// handshakes, accept errors) are rate-limited per listener: at most 20 in 20 s, the next one
// let through saying how many were suppressed.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // Binds and starts accepting on `io`'s thread. Every accepted connection runs the server
  // handshake (on TCP, inside TLS when this process's tls_context() is set: transport/tls.h);
  // authenticated ones are passed to `on_connection` on the I/O thread, which must install
  // handlers. Throws Error if the endpoint cannot be bound. A stale Unix socket file is replaced.
  static std::shared_ptr<Listener> start(
      asio::io_context& io, const std::string& endpoint, std::string token,
      AuthenticatedHandler on_connection,
      std::chrono::milliseconds handshake_timeout = kDefaultHandshakeTimeout);
  static std::shared_ptr<Listener> start(asio::io_context& io, const std::string& endpoint,
                                         std::string token, AuthenticatedHandler on_connection,
                                         ListenerOptions options);
  ~Listener();
  // The bound endpoint, with the real port.
  const std::string& endpoint() const { return endpoint_; }
  // Stops accepting; removes a Unix socket file. Thread-safe, idempotent.
  void close();
  // Whether accepted connections run TLS (a TCP listener of a process with TLS on).
  bool encrypted() const { return tls_ != nullptr; }
  // Pending handshakes evicted so far (LST-4). Thread-safe.
  uint64_t evicted_handshakes() const { return evicted_.load(); }

 private:
  Listener(asio::io_context& io, std::string token, AuthenticatedHandler on_connection,
           ListenerOptions options);
  void accept_next();
  void on_accepted(Socket socket);
  void on_accept_error(const asio::error_code& ec);
  struct PendingHandshake {
    uint64_t id;
    std::string source;  // the peer's address, without the port
    std::weak_ptr<Connection> connection;
  };
  // LST-4: closes one pending handshake to make room for a new one from `source` (`peer`).
  void evict_for(const std::string& source, const std::string& peer);
  void forget_pending(uint64_t id);  // the handshake ended (or was evicted)
  void forget(std::list<PendingHandshake>::iterator it);
  void log(const std::string& line);  // through the rate limit of LST-3

  asio::io_context& io_;
  Acceptor acceptor_;
  std::string endpoint_;
  std::string unix_path_;
  std::string token_;
  std::shared_ptr<asio::ssl::context> tls_;  // null: plaintext
  AuthenticatedHandler on_connection_;
  ListenerOptions options_;
  std::shared_ptr<LogLimiter> log_limiter_;
  // I/O thread only.
  std::list<PendingHandshake> pending_;  // in the handshake, oldest first
  std::unordered_map<std::string, size_t> pending_per_source_;
  uint64_t next_pending_id_ = 0;
  std::atomic<uint64_t> evicted_{0};
  asio::steady_timer retry_timer_;
  std::chrono::milliseconds retry_delay_{0};
};

// Connects to `endpoint` and authenticates (on TCP, inside TLS when this process's
// tls_context() is set). Calls `done` once on the I/O thread with the connection (handlers not
// yet installed) or an error; the error names the endpoint.
void async_connect(asio::io_context& io, const std::string& endpoint, const std::string& token,
                   std::chrono::milliseconds timeout, ClientDoneHandler done);

}  // namespace troupe::transport
