// A small authenticated HTTP server (cpp-httplib underneath) for the read-only endpoints of the
// head, the agents and drivers (/metrics) and the head's dashboard (cli/dashboard.h).
//
// Authentication (HTTP-1): every request but /login must carry the cluster token, either as
// `Authorization: Bearer TOKEN` (what Prometheus's scrape `authorization` setting sends) or as
// the session cookie that /login set; otherwise it is answered 401 with
// `WWW-Authenticate: Bearer realm="troupe"` and nothing of the handler runs. Tokens and cookies
// are compared in constant time. `GET /login?token=TOKEN[&next=/path]` (the URL a user opens once
// in a browser, as with Jupyter) sets the cookie (HttpOnly, SameSite=Strict, Path=/) and
// redirects to `next` (a path on this server; default "/"); a wrong token is a 401. The cookie
// holds HMAC-SHA256(token, "troupe-http-session"), not the token.
// Bounded (HTTP-2): a fixed pool of `threads` threads serves connections; read and write
// timeouts end a client that stalls; request bodies over `payload_max_bytes` are refused (413);
// a keep-alive connection serves at most 16 requests. A client that sends nothing holds one
// thread for at most read_timeout, and the other threads serve everyone else meanwhile. When
// `max_queued` connections already wait for a thread, the accepting thread serves the next one
// itself, so that accepting slows down rather than memory growing.
// Threads: handlers run on the pool's threads, several at once; they must be thread-safe.
// stop() (and the destructor) waits for requests in progress, at most about read_timeout.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace troupe::metrics {
class Registry;
}

namespace troupe::transport {

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpServerOptions {
  std::string address = "127.0.0.1";  // the address to bind
  int port = 0;                       // 0: any free port
  std::string token;                  // the cluster token; must not be empty
  size_t threads = 4;
  size_t max_queued = 64;
  std::chrono::milliseconds read_timeout{2000};
  std::chrono::milliseconds write_timeout{2000};
  size_t payload_max_bytes = 64 * 1024;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply()>;

  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET `path` with `handler` (an exception it throws is a 500 with its message).
  // Before start() only.
  void get(const std::string& path, Handler handler);
  // Binds and starts serving. Throws Error(kInvalidArgument) naming the address and port when
  // it cannot bind, or when the token is empty.
  void start();
  // "ADDRESS:PORT" as bound (valid after start()).
  std::string address() const;
  int port() const { return port_; }
  void stop();

  // The cookie value /login sets for `token` (exposed for tests).
  static std::string session_cookie_value(const std::string& token);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  HttpServerOptions options_;
  int port_ = 0;
  std::thread listener_;
};

// Starts a server (per `options`) whose GET /metrics renders `registry` in the text exposition
// format 0.0.4. `registry` must outlive the server. Throws like HttpServer::start.
std::unique_ptr<HttpServer> serve_metrics(const metrics::Registry& registry,
                                          HttpServerOptions options);

}  // namespace troupe::transport
