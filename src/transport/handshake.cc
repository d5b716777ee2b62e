#include "transport/handshake.h"

#include <asio/steady_timer.hpp>

#include "common/log.h"
#include "common/token.h"

namespace troupe::transport {
namespace {

constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;

std::string client_proof(const std::string& token, const std::string& sn, const std::string& cn) {
  return token::hmac_sha256(token, "troupe-client" + sn + cn);
}
std::string server_proof(const std::string& token, const std::string& sn, const std::string& cn) {
  return token::hmac_sha256(token, "troupe-server" + sn + cn);
}

std::shared_ptr<asio::steady_timer> start_timer(const std::shared_ptr<Connection>& conn,
                                                std::chrono::milliseconds timeout,
                                                std::function<void()> on_expiry) {
  auto timer = std::make_shared<asio::steady_timer>(conn->context(), timeout);
  timer->async_wait([on_expiry = std::move(on_expiry)](const asio::error_code& ec) {
    if (!ec) on_expiry();
  });
  return timer;
}

}  // namespace

void serve_handshake(std::shared_ptr<Connection> conn, const std::string& token,
                     ServerHandshakeOptions options, AuthenticatedHandler on_authenticated) {
  // Shared by the handlers below; lives until the connection drops them.
  struct State {
    std::shared_ptr<LogLimiter> limiter;
    std::function<void()> on_finished;
    bool logged = false;  // the reason of the close is already in the log
    void log(const std::string& line) {
      logged = true;
      size_t suppressed = 0;
      if (limiter && !limiter->allow(&suppressed)) return;
      if (suppressed)
        TROUPE_LOG(Warning) << line << " (" << suppressed
                            << " lines about other failed handshakes suppressed)";
      else
        TROUPE_LOG(Warning) << line;
    }
    void finish() {
      if (!on_finished) return;
      auto f = std::move(on_finished);
      on_finished = nullptr;
      f();
    }
  };
  auto state = std::make_shared<State>();
  state->limiter = std::move(options.log_limiter);
  state->on_finished = std::move(options.on_finished);
  std::string server_nonce = token::random_bytes(kNonceSize);
  std::weak_ptr<Connection> weak = conn;
  auto timer = start_timer(conn, options.timeout, [weak, state] {
    if (auto c = weak.lock()) {
      state->log("closing connection from " + c->peer() + ": authentication timed out");
      c->close(Error(ErrorCode::kTimeout, "authentication timed out"));
    }
  });
  auto on_frame = [weak, token, server_nonce, timer, state,
                   on_authenticated = std::move(on_authenticated)](wire::Frame&& frame) {
    auto c = weak.lock();
    if (!c) return;
    auto reject = [&](const std::string& reason) {
      timer->cancel();
      state->log("rejecting unauthenticated peer " + c->peer() + ": " + reason);
      c->send(wire::FrameKind::kAuthFailed, 0, "authentication failed: " + reason);
      c->close(Error(ErrorCode::kUnauthenticated, reason));
    };
    if (frame.kind != wire::FrameKind::kAuth)
      return reject(std::string("expected an auth frame, got ") + wire::kind_name(frame.kind));
    if (frame.body.size() != kNonceSize + kMacSize) return reject("malformed auth frame");
    std::string client_nonce = frame.body.substr(0, kNonceSize);
    std::string proof = frame.body.substr(kNonceSize);
    if (!token::constant_time_equal(proof, client_proof(token, server_nonce, client_nonce)))
      return reject("wrong cluster token");
    timer->cancel();
    c->set_quiet(false);
    c->send(wire::FrameKind::kAuthOk, 0, server_proof(token, server_nonce, client_nonce));
    state->finish();
    on_authenticated(c);
  };
  auto on_close = [weak, timer, state](const Error& reason) {
    timer->cancel();
    // A peer that just went away is not worth a line; a bad frame is.
    if (!state->logged && reason.code() != ErrorCode::kConnectionLost) {
      if (auto c = weak.lock())
        state->log("closing connection from " + c->peer() + ": " + reason.message());
    }
    state->finish();
  };
  conn->set_quiet(true);
  conn->set_handlers(wire::handshake_limits(), std::move(on_frame), std::move(on_close));
  conn->send(wire::FrameKind::kChallenge, 0, server_nonce);
  conn->start();
}

namespace {
// A plaintext TCP client of a TLS server waits for a challenge that never comes (TLS servers wait
// for the client's hello): say so where the wait ends.
std::string plaintext_hint(const Connection& c) {
  if (c.encrypted() || c.peer().rfind("tcp:", 0) != 0) return "";
  return " (if " + c.peer() + " uses TLS, set TROUPE_TLS_DIR to the cluster's TLS directory)";
}
}  // namespace

void client_handshake(std::shared_ptr<Connection> conn, const std::string& token,
                      std::chrono::milliseconds timeout, ClientDoneHandler done) {
  struct State {
    ClientDoneHandler done;
    std::string client_nonce;
    std::string server_nonce;
    bool finished = false;
    void finish(const std::shared_ptr<Connection>& c, const Error* error) {
      if (finished) return;
      finished = true;
      done(c, error);
    }
  };
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  state->client_nonce = token::random_bytes(kNonceSize);
  std::weak_ptr<Connection> weak = conn;
  auto timer = start_timer(conn, timeout, [weak, state] {
    if (auto c = weak.lock()) {
      Error e(ErrorCode::kTimeout,
              "authentication with " + c->peer() + " timed out" + plaintext_hint(*c));
      state->finish(c, &e);
      c->close(e);
    }
  });
  auto on_frame = [weak, token, state, timer](wire::Frame&& frame) {
    auto c = weak.lock();
    if (!c) return;
    auto fail = [&](ErrorCode code, const std::string& reason) {
      timer->cancel();
      Error e(code, reason);
      state->finish(c, &e);
      c->close(e);
    };
    if (state->server_nonce.empty()) {
      if (frame.kind != wire::FrameKind::kChallenge || frame.body.size() != kNonceSize)
        return fail(ErrorCode::kProtocol, c->peer() + " did not start the troupe handshake");
      state->server_nonce = frame.body;
      c->send(wire::FrameKind::kAuth, 0,
              state->client_nonce + client_proof(token, state->server_nonce, state->client_nonce));
      return;
    }
    if (frame.kind == wire::FrameKind::kAuthFailed)
      return fail(ErrorCode::kUnauthenticated, c->peer() +
                                                   " refused the connection: " + frame.body +
                                                   " (is TROUPE_TOKEN the cluster's token?)");
    if (frame.kind != wire::FrameKind::kAuthOk ||
        !token::constant_time_equal(frame.body,
                                    server_proof(token, state->server_nonce, state->client_nonce)))
      return fail(ErrorCode::kUnauthenticated,
                  c->peer() + " could not prove the cluster token; refusing to talk to it");
    timer->cancel();
    state->finish(c, nullptr);
  };
  auto on_close = [weak, state, timer](const Error& reason) {
    timer->cancel();
    // A refused TLS handshake stays kUnauthenticated; anything else lost the connection.
    auto c = weak.lock();
    Error e(reason.code() == ErrorCode::kUnauthenticated ? ErrorCode::kUnauthenticated
                                                         : ErrorCode::kConnectionLost,
            "connection closed during authentication: " + reason.message() +
                (c ? plaintext_hint(*c) : std::string()));
    state->finish(nullptr, &e);
  };
  conn->set_handlers(wire::handshake_limits(), std::move(on_frame), std::move(on_close));
  conn->start();
}

}  // namespace troupe::transport
