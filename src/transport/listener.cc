#include "transport/listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <cstring>

#include "common/log.h"
#include "transport/tls.h"

namespace troupe::transport {
namespace {

constexpr size_t kLogBurst = 20;
constexpr auto kLogWindow = std::chrono::seconds(20);
constexpr std::chrono::milliseconds kMinRetryDelay{10};
constexpr std::chrono::milliseconds kMaxRetryDelay{500};

bool is_tcp(const std::string& endpoint) { return endpoint.rfind("tcp:", 0) == 0; }

void set_nodelay(Socket& socket) {
  int one = 1;
  ::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

asio::ip::tcp::endpoint as_tcp(const asio::generic::stream_protocol::endpoint& ep) {
  asio::ip::tcp::endpoint tcp;
  size_t n = std::min<size_t>(ep.size(), tcp.capacity());
  std::memcpy(tcp.data(), ep.data(), n);
  tcp.resize(n);
  return tcp;
}

std::string describe(const asio::generic::stream_protocol::endpoint& ep) {
  if (ep.protocol().family() == AF_UNIX) return "unix peer";
  auto tcp = as_tcp(ep);
  return "tcp:" + tcp.address().to_string() + ":" + std::to_string(tcp.port());
}

}  // namespace

asio::generic::stream_protocol::endpoint parse_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("unix:", 0) == 0) {
    std::string path = endpoint.substr(5);
    if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path))
      throw Error(ErrorCode::kInvalidArgument, "bad unix socket path in '" + endpoint + "'");
    return asio::local::stream_protocol::endpoint(path);
  }
  if (is_tcp(endpoint)) {
    std::string rest = endpoint.substr(4);
    auto colon = rest.rfind(':');
    if (colon == std::string::npos)
      throw Error(ErrorCode::kInvalidArgument, "missing port in '" + endpoint + "'");
    asio::error_code ec;
    auto address = asio::ip::make_address(rest.substr(0, colon), ec);
    if (ec) throw Error(ErrorCode::kInvalidArgument, "bad address in '" + endpoint + "'");
    int port = 0;
    try {
      port = std::stoi(rest.substr(colon + 1));
    } catch (...) {
      port = -1;
    }
    if (port < 0 || port > 65535)
      throw Error(ErrorCode::kInvalidArgument, "bad port in '" + endpoint + "'");
    return asio::ip::tcp::endpoint(address, static_cast<uint16_t>(port));
  }
  throw Error(ErrorCode::kInvalidArgument,
              "endpoint '" + endpoint + "' must start with unix: or tcp:");
}

Listener::Listener(asio::io_context& io, std::string token, AuthenticatedHandler on_connection,
                   ListenerOptions options)
    : io_(io),
      acceptor_(io),
      token_(std::move(token)),
      on_connection_(std::move(on_connection)),
      options_(options),
      log_limiter_(std::make_shared<LogLimiter>(kLogBurst, kLogWindow)),
      retry_timer_(io) {}

Listener::~Listener() {
  asio::error_code ec;
  acceptor_.close(ec);
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
}

std::shared_ptr<Listener> Listener::start(asio::io_context& io, const std::string& endpoint,
                                          std::string token, AuthenticatedHandler on_connection,
                                          std::chrono::milliseconds handshake_timeout) {
  ListenerOptions options;
  options.handshake_timeout = handshake_timeout;
  return start(io, endpoint, std::move(token), std::move(on_connection), options);
}

std::shared_ptr<Listener> Listener::start(asio::io_context& io, const std::string& endpoint,
                                          std::string token, AuthenticatedHandler on_connection,
                                          ListenerOptions options) {
  std::shared_ptr<Listener> l(
      new Listener(io, std::move(token), std::move(on_connection), options));
  auto ep = parse_endpoint(endpoint);
  if (is_tcp(endpoint)) l->tls_ = tls_context();
  asio::error_code ec;
  if (!is_tcp(endpoint)) {
    l->unix_path_ = endpoint.substr(5);
    ::unlink(l->unix_path_.c_str());
  }
  l->acceptor_.open(ep.protocol(), ec);
  if (!ec && is_tcp(endpoint)) l->acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) ::fcntl(l->acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) l->acceptor_.bind(ep, ec);
  if (!ec) l->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error(ErrorCode::kResourceUnavailable,
                "cannot listen on " + endpoint + ": " + ec.message());
  if (!l->unix_path_.empty()) {
    ::chmod(l->unix_path_.c_str(), 0600);
    l->endpoint_ = endpoint;
  } else {
    auto bound = l->acceptor_.local_endpoint();
    l->endpoint_ = describe(bound);
  }
  asio::post(io, [l] { l->accept_next(); });
  return l;
}

void Listener::accept_next() {
  std::weak_ptr<Listener> weak = shared_from_this();
  acceptor_.async_accept([weak](const asio::error_code& ec, Socket socket) {
    auto self = weak.lock();
    if (!self) return;
    if (ec) return self->on_accept_error(ec);
    self->retry_delay_ = std::chrono::milliseconds(0);
    self->on_accepted(std::move(socket));
    self->accept_next();
  });
}

void Listener::on_accepted(Socket socket) {
  std::string peer = endpoint_;
  std::string source = "unix";
  asio::error_code pec;
  auto remote = socket.remote_endpoint(pec);
  if (!pec && remote.protocol().family() != AF_UNIX) {
    set_nodelay(socket);
    peer = describe(remote);
    source = as_tcp(remote).address().to_string();
  }
  if (pending_.size() >= std::max<size_t>(options_.max_pending_handshakes, 1))
    evict_for(source, peer);
  // tls_ is set only on a TCP listener: every connection it accepts runs TLS.
  auto conn = tls_ ? std::make_shared<Connection>(std::move(socket), peer, tls_, TlsRole::kServer)
                   : std::make_shared<Connection>(std::move(socket), peer);
  uint64_t id = next_pending_id_++;
  pending_.push_back(PendingHandshake{id, source, conn});
  ++pending_per_source_[source];
  ServerHandshakeOptions handshake;
  handshake.timeout = options_.handshake_timeout;
  handshake.log_limiter = log_limiter_;
  std::weak_ptr<Listener> weak = shared_from_this();
  handshake.on_finished = [weak, id] {
    if (auto self = weak.lock()) self->forget_pending(id);
  };
  serve_handshake(conn, token_, std::move(handshake), on_connection_);
}

void Listener::evict_for(const std::string& source, const std::string& peer) {
  auto weight = [&](const std::string& s) {
    auto it = pending_per_source_.find(s);
    return (it == pending_per_source_.end() ? 0 : it->second) + (s == source ? 1 : 0);
  };
  size_t most = 0;
  for (const auto& [s, n] : pending_per_source_) most = std::max(most, weight(s));
  // The oldest handshake of a source with the most (ties: the source with the oldest one).
  auto victim = std::find_if(pending_.begin(), pending_.end(),
                             [&](const PendingHandshake& p) { return weight(p.source) == most; });
  if (victim == pending_.end()) return;
  std::string from = victim->source;
  size_t from_count = pending_per_source_[from];
  auto conn = victim->connection.lock();
  forget(victim);
  uint64_t evicted = ++evicted_;
  if (!conn) return;
  conn->close(Error(ErrorCode::kResourceUnavailable,
                    "evicted from the handshake by a new connection from " + peer + ": " +
                        std::to_string(options_.max_pending_handshakes) +
                        " connections were in the handshake (the limit), " +
                        std::to_string(from_count) + " of them from " + from + " (" +
                        std::to_string(evicted) + " evicted so far)"));
}

void Listener::forget_pending(uint64_t id) {
  // At most max_pending_handshakes entries; an evicted one is already gone.
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->id == id) return forget(it);
  }
}

void Listener::forget(std::list<PendingHandshake>::iterator it) {
  auto count = pending_per_source_.find(it->source);
  if (count != pending_per_source_.end() && --count->second == 0) pending_per_source_.erase(count);
  pending_.erase(it);
}

void Listener::on_accept_error(const asio::error_code& ec) {
  if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
  // Out of descriptors or memory: trying again at once fails again at once (LST-2).
  retry_delay_ = std::min(kMaxRetryDelay, std::max(kMinRetryDelay, retry_delay_ * 2));
  log("accept on " + endpoint_ + " failed: " + ec.message() + "; retrying in " +
      std::to_string(retry_delay_.count()) + " ms");
  retry_timer_.expires_after(retry_delay_);
  std::weak_ptr<Listener> weak = shared_from_this();
  retry_timer_.async_wait([weak](const asio::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || !self->acceptor_.is_open()) return;
    self->accept_next();
  });
}

void Listener::log(const std::string& line) {
  size_t suppressed = 0;
  if (!log_limiter_->allow(&suppressed)) return;
  if (suppressed)
    TROUPE_LOG(Warning) << line << " (" << suppressed << " similar lines suppressed)";
  else
    TROUPE_LOG(Warning) << line;
}

void Listener::close() {
  asio::post(io_, [self = shared_from_this()] {
    asio::error_code ec;
    self->acceptor_.close(ec);
    self->retry_timer_.cancel();
    if (!self->unix_path_.empty()) {
      ::unlink(self->unix_path_.c_str());
      self->unix_path_.clear();
    }
  });
}

void async_connect(asio::io_context& io, const std::string& endpoint, const std::string& token,
                   std::chrono::milliseconds timeout, ClientDoneHandler done) {
  asio::generic::stream_protocol::endpoint ep;
  std::shared_ptr<asio::ssl::context> tls;
  try {
    ep = parse_endpoint(endpoint);
    if (is_tcp(endpoint)) tls = tls_context();
  } catch (const Error& e) {
    asio::post(io, [done, e] { done(nullptr, &e); });
    return;
  }
  auto socket = std::make_shared<Socket>(io, ep.protocol());
  socket->async_connect(ep, [socket, endpoint, token, timeout, done,
                             tls](const asio::error_code& ec) {
    if (ec) {
      Error e(ErrorCode::kConnectionLost, "cannot connect to " + endpoint + ": " + ec.message());
      done(nullptr, &e);
      return;
    }
    if (is_tcp(endpoint)) set_nodelay(*socket);
    auto conn =
        tls ? std::make_shared<Connection>(std::move(*socket), endpoint, tls, TlsRole::kClient)
            : std::make_shared<Connection>(std::move(*socket), endpoint);
    client_handshake(conn, token, timeout, done);
  });
}

}  // namespace troupe::transport
