// The authenticated HTTP server (http_server.h HTTP-1, HTTP-2) over real loopback sockets, with
// requests written by hand so that every byte the server sees is the test's.
#include "transport/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "test_util.h"
#include "troupe/error.h"

namespace troupe::transport {
namespace {

using namespace std::chrono_literals;

#define EXPECT_LACKS(text, part) EXPECT_EQ((text).find(part), std::string::npos) << (text)

constexpr const char* kToken = "http-test-token";

// A connected TCP socket to 127.0.0.1:port (-1 on failure).
int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{5, 0};  // a hung server fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends one GET with `headers` ("Name: value\r\n" each) and returns the whole response.
std::string get(int port, const std::string& target, const std::string& headers = "") {
  int fd = connect_to(port);
  if (fd < 0) return "connect failed";
  std::string req =
      "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers + "\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return "send failed";
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  ::close(fd);
  return out;
}

std::string status_line(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

class HttpServerTest : public testing::Test {
 protected:
  void start(HttpServerOptions o = {}) {
    o.token = kToken;
    server_ = std::make_unique<HttpServer>(o);
    server_->get("/metrics", [] { return HttpReply{200, "text/plain; version=0.0.4", "m 1\n"}; });
    server_->start();
    ASSERT_GT(server_->port(), 0);
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, RefusesRequestsWithoutTheToken) {
  start();
  std::string r = get(server_->port(), "/metrics");
  EXPECT_EQ(status_line(r), "HTTP/1.1 401 Unauthorized");
  EXPECT_HAS(r, "WWW-Authenticate: Bearer realm=\"troupe\"");
  EXPECT_LACKS(r, "m 1");
  r = get(server_->port(), "/metrics", "Authorization: Bearer wrong-token\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 401 Unauthorized");
  EXPECT_LACKS(r, "m 1");
  // The token as a cookie is not the session cookie.
  r = get(server_->port(), "/metrics", std::string("Cookie: troupe_session=") + kToken + "\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 401 Unauthorized");
  // Nor is a prefix of the token.
  r = get(server_->port(), "/metrics", "Authorization: Bearer http-test\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 401 Unauthorized");
}

TEST_F(HttpServerTest, ServesTheBearerOfTheToken) {
  start();
  std::string r =
      get(server_->port(), "/metrics", std::string("Authorization: Bearer ") + kToken + "\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 200 OK");
  EXPECT_HAS(r, "Content-Type: text/plain; version=0.0.4");
  EXPECT_HAS(r, "\r\n\r\nm 1\n");
  EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(server_->port()));
}

// A browser opens /login?token=... once and gets a cookie that then authenticates it.
TEST_F(HttpServerTest, LoginSetsACookieThatAuthenticates) {
  start();
  std::string wrong = get(server_->port(), "/login?token=nope&next=/metrics");
  EXPECT_EQ(status_line(wrong), "HTTP/1.1 401 Unauthorized");
  EXPECT_LACKS(wrong, "Set-Cookie");
  std::string r = get(server_->port(), std::string("/login?token=") + kToken + "&next=/metrics");
  EXPECT_EQ(status_line(r), "HTTP/1.1 303 See Other");
  EXPECT_HAS(r, "Location: /metrics\r\n");
  const std::string cookie = HttpServer::session_cookie_value(kToken);
  EXPECT_EQ(cookie.size(), 64u);  // hex of HMAC-SHA256
  EXPECT_HAS(r, "Set-Cookie: troupe_session=" + cookie + "; HttpOnly; SameSite=Strict; Path=/");
  std::string page =
      get(server_->port(), "/metrics", "Cookie: other=1; troupe_session=" + cookie + "\r\n");
  EXPECT_EQ(status_line(page), "HTTP/1.1 200 OK");
  EXPECT_HAS(page, "m 1\n");
  // `next` leading to another host is replaced by "/".
  r = get(server_->port(), std::string("/login?token=") + kToken + "&next=//evil.example/");
  EXPECT_HAS(r, "Location: /\r\n");
}

// HTTP-2: a client that connects and sends half a request then nothing holds one thread; a
// good request on another connection is served meanwhile (the silent one is still open then),
// and the silent one is cut by the read timeout.
TEST_F(HttpServerTest, ASilentClientDoesNotBlockOthers) {
  HttpServerOptions o;
  o.threads = 2;
  o.read_timeout = 1500ms;
  start(o);
  int silent = connect_to(server_->port());
  ASSERT_GE(silent, 0);
  std::string partial = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(::send(silent, partial.data(), partial.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(partial.size()));
  auto t0 = std::chrono::steady_clock::now();
  std::string r =
      get(server_->port(), "/metrics", std::string("Authorization: Bearer ") + kToken + "\r\n");
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(status_line(r), "HTTP/1.1 200 OK");
  EXPECT_LT(took, 1000ms);
  char c;
  // Still open: no byte and no end of file yet.
  EXPECT_EQ(::recv(silent, &c, 1, MSG_DONTWAIT), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK);
  // Then the server gives up on it: end of file (or a 408 first) within the timeout's range.
  std::string rest;
  char buf[512];
  for (ssize_t n; (n = ::recv(silent, buf, sizeof(buf), 0)) > 0;) rest.append(buf, n);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4500ms);
  EXPECT_LACKS(rest, "m 1");
  ::close(silent);
}

TEST_F(HttpServerTest, RefusesAnEmptyTokenAndAPortInUse) {
  HttpServer no_token(HttpServerOptions{});
  try {
    no_token.start();
    FAIL() << "a server without a token started";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "an HTTP server needs the cluster token");
  }
  start();
  HttpServerOptions o;
  o.token = kToken;
  o.port = server_->port();
  HttpServer second(o);
  try {
    second.start();
    FAIL() << "two servers bound one port";
  } catch (const Error& e) {
    EXPECT_HAS(e.message(), "cannot listen for HTTP on 127.0.0.1:" + std::to_string(o.port));
  }
}

}  // namespace
}  // namespace troupe::transport
