// Helpers for the live transport tests: a temporary directory, a tee of stderr (to assert on the
// logged reasons), a raw blocking POSIX socket through which a test sends every byte itself, and
// a fixture that runs a real Listener + RpcPeer server on a Unix socket or on TCP loopback.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/token.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "transport/tls.h"
#include "wire/frame.h"
#include "wire/rpc_message.h"

namespace troupe::transport::testing {

using namespace std::chrono_literals;
using wire::FrameKind;

// Every wait in these tests ends by this deadline.
constexpr std::chrono::seconds kDeadline{5};
inline const std::string kToken(64, 'a');

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/troupe-transport-XXXXXX";
    if (::mkdtemp(tmpl)) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// While alive, everything written to fd 2 still reaches the real stderr and is also kept for
// the test to search. The log writes a line before it closes a connection, so once a test has
// seen a close the reason is already here (wait_for has a deadline all the same).
class StderrTee {
 public:
  StderrTee() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    std::fflush(stderr);
    saved_ = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    ::dup2(p[1], STDERR_FILENO);
    ::close(p[1]);
    read_fd_ = p[0];
    thread_ = std::thread([this] {
      char buf[4096];
      for (;;) {
        ssize_t n = ::read(read_fd_, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        ssize_t unused = ::write(saved_, buf, static_cast<size_t>(n));
        (void)unused;
        std::lock_guard<std::mutex> lock(mu_);
        text_.append(buf, static_cast<size_t>(n));
        cv_.notify_all();
      }
    });
  }
  ~StderrTee() {
    if (read_fd_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);  // drops the last write end of the pipe: the reader sees EOF
    thread_.join();
    ::close(read_fd_);
    ::close(saved_);
  }
  bool wait_for(const std::string& needle, std::chrono::milliseconds timeout = kDeadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return text_.find(needle) != std::string::npos; });
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  int saved_ = -1, read_fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
};

// ---- frames built byte by byte ----

template <typename T>
void put_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline std::string raw_header(uint32_t magic, uint8_t version, uint8_t kind, uint16_t flags,
                              uint64_t request_id, uint32_t body_size, uint32_t count) {
  std::string h;
  put_le(h, magic);
  h.push_back(static_cast<char>(version));
  h.push_back(static_cast<char>(kind));
  put_le(h, flags);
  put_le(h, request_id);
  put_le(h, body_size);
  put_le(h, count);
  return h;
}
// A well-formed header of `kind` with the given sizes.
inline std::string header_of(FrameKind kind, uint64_t id, uint32_t body_size, uint32_t count = 0) {
  return raw_header(wire::kMagic, wire::kVersion, static_cast<uint8_t>(kind), 0, id, body_size,
                    count);
}
inline std::string frame_bytes(FrameKind kind, uint64_t id, const std::string& body,
                               const std::vector<std::string>& attachments = {}) {
  std::vector<Bytes> atts;
  for (const auto& a : attachments) atts.push_back(Bytes::copy_of(a));
  std::string out = wire::encode_prefix(kind, id, body.size(), atts) + body;
  for (const auto& a : attachments) out += a;
  return out;
}
inline std::string request_body(const std::string& method, const Map& kwargs) {
  std::string body;
  std::vector<Bytes> atts;
  wire::encode_request(method, kwargs, body, atts);
  return body;
}

// Takes one complete frame off the front of `buf` (sent by the troupe code under test).
inline std::optional<wire::Frame> take_frame(std::string& buf) {
  if (buf.size() < wire::kHeaderSize) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(buf.data());
  wire::FrameLimits any;
  any.max_body = UINT32_MAX;
  any.max_attachments = UINT32_MAX;
  any.max_attachment = any.max_total = UINT64_MAX;
  wire::FrameHeader h = wire::decode_header(p, any);
  size_t table = 8ull * h.attachment_count;
  if (buf.size() < wire::kHeaderSize + table) return std::nullopt;
  auto sizes =
      wire::decode_attachment_sizes(p + wire::kHeaderSize, h.attachment_count, h.body_size, any);
  size_t need = wire::kHeaderSize + table + h.body_size;
  for (uint64_t s : sizes) need += s;
  if (buf.size() < need) return std::nullopt;
  wire::Frame f;
  f.kind = h.kind;
  f.request_id = h.request_id;
  size_t pos = wire::kHeaderSize + table;
  f.body = buf.substr(pos, h.body_size);
  pos += h.body_size;
  for (uint64_t s : sizes) {
    f.attachments.push_back(Bytes::copy_of(std::string_view(buf).substr(pos, s)));
    pos += s;
  }
  buf.erase(0, need);
  return f;
}

// A plain blocking socket: the test writes raw bytes and reads with deadlines.
class RawSocket {
 public:
  explicit RawSocket(int fd) : fd_(fd) {}
  // Connects to "unix:PATH" or "tcp:ADDRESS:PORT"; fd() < 0 on failure.
  // With `source` (TCP only), the connection comes from that local address (any of 127.0.0.0/8).
  explicit RawSocket(const std::string& endpoint, const std::string& source = "") {
    if (endpoint.rfind("unix:", 0) == 0) {
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", endpoint.c_str() + 5);
      fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) reset();
    } else {
      auto colon = endpoint.rfind(':');
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
      ::inet_pton(AF_INET, endpoint.substr(4, colon - 4).c_str(), &a.sin_addr);
      fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (!source.empty()) {
        sockaddr_in from{};
        from.sin_family = AF_INET;
        ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) reset();
      }
      if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) reset();
    }
  }
  ~RawSocket() { reset(); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  RawSocket(RawSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  int fd() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // How the server names this connection in its log lines.
  std::string name_at_server(const std::string& endpoint) const {
    if (endpoint.rfind("tcp:", 0) != 0) return endpoint;
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    return "tcp:127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }

  // Writes all of `bytes`; false once the server has closed (EPIPE, ECONNRESET).
  bool write(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // The next frame, or nullopt if the peer closed or nothing came within `timeout`.
  std::optional<wire::Frame> read_frame(std::chrono::milliseconds timeout = kDeadline) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      if (auto f = take_frame(buf_)) return f;
      if (fill(deadline) <= 0) return std::nullopt;
    }
  }

  // Reads until the peer closes the connection (EOF or reset). Returns the frames it sent first,
  // or nullopt if the connection is still open after `timeout`.
  std::optional<std::vector<wire::Frame>> read_until_closed(
      std::chrono::milliseconds timeout = kDeadline) {
    auto deadline = Clock::now() + timeout;
    int r;
    while ((r = fill(deadline)) > 0) {
    }
    if (r < 0) return std::nullopt;
    std::vector<wire::Frame> frames;
    while (auto f = take_frame(buf_)) frames.push_back(std::move(*f));
    return frames;
  }

  // Reads the server's challenge and keeps it for authenticate(): the connection is then in
  // the server's handshake. False if none came.
  bool await_challenge() {
    auto challenge = read_frame();
    if (!challenge || challenge->kind != FrameKind::kChallenge || challenge->body.size() != 32)
      return false;
    challenge_ = challenge->body;
    return true;
  }

  // The client side of the handshake done by hand, as handshake.h specifies it (the challenge
  // read now unless await_challenge() read it).
  ::testing::AssertionResult authenticate(const std::string& token,
                                          std::string* auth_body = nullptr) {
    if (challenge_.empty() && !await_challenge())
      return ::testing::AssertionFailure() << "no 32-byte challenge from the server";
    const std::string sn = challenge_;
    std::string cn = token::random_bytes(32);
    std::string body = cn + token::hmac_sha256(token, "troupe-client" + sn + cn);
    if (auth_body) *auth_body = body;
    if (!write(frame_bytes(FrameKind::kAuth, 0, body)))
      return ::testing::AssertionFailure() << "server closed before auth";
    auto ok = read_frame();
    if (!ok || ok->kind != FrameKind::kAuthOk)
      return ::testing::AssertionFailure()
             << "no auth_ok: " << (ok ? wire::kind_name(ok->kind) + (": " + ok->body) : "closed");
    if (ok->body != token::hmac_sha256(token, "troupe-server" + sn + cn))
      return ::testing::AssertionFailure() << "the server's proof is wrong";
    return ::testing::AssertionSuccess();
  }

 private:
  // Receives more bytes into buf_: >0 got some, 0 the peer closed, -1 the deadline passed.
  int fill(Clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() < 0) return -1;
      pollfd p{fd_, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return -1;
      char tmp[65536];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return 0;  // EOF, ECONNRESET or another error: the connection is gone
      buf_.append(tmp, static_cast<size_t>(n));
      return 1;
    }
  }

  int fd_ = -1;
  std::string buf_;
  std::string challenge_;
};

// A live server: a Listener whose authenticated connections get an RpcPeer serving "echo"
// (replies with its kwargs, counted) and "hold" (never answered). Parameterised by transport.
class LiveServerTest : public ::testing::Test {
 protected:
  // The server's limits after authentication: small, so oversized frames are cheap to send.
  static wire::FrameLimits server_limits() {
    wire::FrameLimits l;
    l.max_body = 1024;
    l.max_attachments = 4;
    l.max_attachment = 16u << 20;
    l.max_total = 40u << 20;
    return l;
  }
  virtual std::string transport() const = 0;
  virtual std::chrono::milliseconds handshake_timeout() const { return kDeadline; }

  // "unix", "tcp", or "tls" (TCP with this process's TLS on: a new cluster CA in dir_).
  void SetUp() override {
    if (transport() == "tls") {
      make_cluster_ca(dir_.path() + "/tls");
      configure_tls(TlsSettings{dir_.path() + "/tls", "test"});
    }
    std::string ep = transport() == "unix" ? "unix:" + dir_.path() + "/troupe.sock"
                                           : std::string("tcp:127.0.0.1:0");
    listener_ = Listener::start(
        loop_.context(), ep, kToken, [this](std::shared_ptr<Connection> c) { on_auth(c); },
        handshake_timeout());
    endpoint_ = listener_->endpoint();
    EXPECT_EQ(listener_->encrypted(), transport() == "tls");
    if (transport() != "unix") {  // loopback unless told otherwise
      ASSERT_EQ(endpoint_.rfind("tcp:127.0.0.1:", 0), 0u) << endpoint_;
    }
    bystander_ = connect_ok();
    ASSERT_NE(bystander_, nullptr);
  }

  void TearDown() override {
    std::vector<std::shared_ptr<RpcPeer>> peers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      peers = server_peers_;
      peers.insert(peers.end(), client_peers_.begin(), client_peers_.end());
      held_.clear();
    }
    for (auto& p : peers) p->close(Error(ErrorCode::kShutdown, "test over"));
    loop_.run_sync([&] {  // after the closes posted above
      listener_->close();
      listener_.reset();
    });
    loop_.run_sync([] {});
    loop_.stop();
    if (transport() == "tls") configure_tls(std::nullopt);
  }

  void on_auth(std::shared_ptr<Connection> c) {
    ++authenticated_;
    RpcPeer::Handlers h;
    h.on_request = [this](wire::Request&& r, const Responder& responder) {
      if (r.method == "echo") {
        ++requests_;
        responder.reply(Value(std::move(r.kwargs)));
      } else if (r.method == "hold") {
        std::lock_guard<std::mutex> lock(mu_);
        held_.push_back(responder);
      } else {
        responder.fail(Error(ErrorCode::kUnknownMethod, r.method));
      }
    };
    auto peer = RpcPeer::attach(c, server_limits(), std::move(h));
    std::lock_guard<std::mutex> lock(mu_);
    server_peers_.push_back(peer);
  }

  struct Connected {
    std::shared_ptr<RpcPeer> peer;
    std::optional<Error> error;
  };
  // Connects with the real client (async_connect + RpcPeer).
  Connected connect(const std::string& token) {
    auto p = std::make_shared<std::promise<Connected>>();
    async_connect(loop_.context(), endpoint_, token, kDeadline,
                  [this, p](std::shared_ptr<Connection> c, const Error* e) {
                    if (e) return p->set_value({nullptr, *e});
                    auto peer = RpcPeer::attach(c, wire::FrameLimits{}, {});
                    std::lock_guard<std::mutex> lock(mu_);
                    client_peers_.push_back(peer);
                    p->set_value({peer, std::nullopt});
                  });
    auto f = p->get_future();
    if (f.wait_for(kDeadline + 1s) != std::future_status::ready)
      return {nullptr, Error(ErrorCode::kTimeout, "connect did not finish")};
    return f.get();
  }
  std::shared_ptr<RpcPeer> connect_ok() {
    Connected c = connect(kToken);
    EXPECT_FALSE(c.error) << c.error->what();
    return c.peer;
  }

  static ::testing::AssertionResult echo(RpcPeer& peer) {
    Map kwargs{{"x", 42}, {"s", "hello"}};
    auto f = peer.call("echo", kwargs, "echo");
    if (!f.wait_for(kDeadline)) return ::testing::AssertionFailure() << "echo timed out";
    if (auto e = f.error()) return ::testing::AssertionFailure() << e->what();
    if (f.get() != Value(kwargs))
      return ::testing::AssertionFailure() << "echo returned " << f.get().debug_string();
    return ::testing::AssertionSuccess();
  }

  // The process keeps serving: the connection that was open during the attack still works, and
  // a new client can still connect and call.
  void expect_still_serving() {
    SCOPED_TRACE("other clients are still served");
    EXPECT_TRUE(echo(*bystander_));
    auto fresh = connect_ok();
    ASSERT_NE(fresh, nullptr);
    EXPECT_TRUE(echo(*fresh));
  }

  // The server closes `raw` within the deadline and logs "<what> <peer>: <reason>".
  std::vector<wire::Frame> expect_closed(RawSocket& raw, const std::string& peer,
                                         const std::string& what, const std::string& reason) {
    auto frames = raw.read_until_closed();
    EXPECT_TRUE(frames.has_value()) << "the server did not close the connection";
    std::string line = what + " " + peer + ": " + reason;
    EXPECT_TRUE(log_.wait_for(line)) << "no log line with '" << line << "'";
    return frames.value_or(std::vector<wire::Frame>{});
  }

  StderrTee log_;
  TempDir dir_;
  IoLoop loop_;  // declared after the objects above and before those that use it
  std::shared_ptr<Listener> listener_;
  std::string endpoint_;
  std::shared_ptr<RpcPeer> bystander_;
  std::atomic<int> authenticated_{0};  // connections that passed the handshake
  std::atomic<int> requests_{0};       // "echo" requests served
  std::mutex mu_;
  std::vector<std::shared_ptr<RpcPeer>> server_peers_, client_peers_;
  std::vector<Responder> held_;
};

inline std::string transport_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace troupe::transport::testing
