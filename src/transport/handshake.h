// Authentication of every connection, before any other frame is read.
//
//   server -> client  kChallenge  server nonce (32 bytes)
//   client -> server  kAuth       client nonce (32) + HMAC(token, "troupe-client" sn cn) (32)
//   server -> client  kAuthOk     HMAC(token, "troupe-server" sn cn) (32)
//                  or kAuthFailed reason, then close
//
// Both proofs are compared in constant time; the client also checks the server, so neither end
// talks to a peer without the token. Until the handshake succeeds only handshake frames of at
// most 512 bytes are accepted; anything else closes the connection with a logged reason.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "transport/connection.h"
#include "transport/log_limiter.h"

namespace troupe::transport {

using AuthenticatedHandler = std::function<void(std::shared_ptr<Connection>)>;
using ClientDoneHandler = std::function<void(std::shared_ptr<Connection>, const Error* error)>;

struct ServerHandshakeOptions {
  std::chrono::milliseconds timeout{10000};
  // Failures are logged through it (one line per failure while it allows); null: all logged.
  std::shared_ptr<LogLimiter> log_limiter;
  // Called once on the I/O thread when the handshake ends, whether it succeeded or not (before
  // `on_authenticated`).
  std::function<void()> on_finished;
};

// Runs the server side on a new connection and starts it. On success calls `on_authenticated`
// on the I/O thread, which must install the connection's real handlers; on failure logs the
// reason and closes. Gives up after `options.timeout`. Until it succeeds the connection does
// not log by itself: every failure is logged here, through the options' rate limit.
void serve_handshake(std::shared_ptr<Connection> connection, const std::string& token,
                     ServerHandshakeOptions options, AuthenticatedHandler on_authenticated);

// Runs the client side on a new connection and starts it. Calls `done` exactly once on the I/O
// thread: with error == nullptr after success (the caller then installs its handlers), else with
// the error (kUnauthenticated, kTimeout or kConnectionLost).
void client_handshake(std::shared_ptr<Connection> connection, const std::string& token,
                      std::chrono::milliseconds timeout, ClientDoneHandler done);

}  // namespace troupe::transport
