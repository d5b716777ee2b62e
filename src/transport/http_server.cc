#include "transport/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include "common/metrics.h"
#include "common/token.h"
#include "troupe/error.h"

namespace troupe::transport {
namespace {

constexpr const char* kCookieName = "troupe_session";

std::string hex(const std::string& raw) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or empty.
std::string cookie_value(const std::string& header, const std::string& name) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t end = header.find(';', pos);
    if (end == std::string::npos) end = header.size();
    std::string part = header.substr(pos, end - pos);
    size_t start = part.find_first_not_of(' ');
    if (start != std::string::npos) part = part.substr(start);
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
    pos = end + 1;
  }
  return {};
}

// A path on this server to go to after /login: "/..." but not "//..." (another host), and no
// characters that could split the Location header.
std::string safe_next(const std::string& next) {
  if (next.empty() || next[0] != '/' || next.rfind("//", 0) == 0) return "/";
  for (char c : next)
    if (c == '\\' || c == '\r' || c == '\n' || static_cast<unsigned char>(c) < 0x20) return "/";
  return next;
}

// HTTP-2: `threads` threads serve connections from a queue of at most `max_queued`; past that
// the accepting thread serves the connection itself. shutdown() serves what is queued, then
// joins the threads.
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.size() < max_queued_) {
        jobs_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    fn();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

struct HttpServer::Impl {
  httplib::Server server;
  std::vector<std::string> paths;
  std::string cookie;  // session_cookie_value(token)
};

std::string HttpServer::session_cookie_value(const std::string& token) {
  return hex(token::hmac_sha256(token, "troupe-http-session"));
}

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>()), options_(std::move(options)) {
  impl_->cookie = session_cookie_value(options_.token);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::get(const std::string& path, Handler handler) {
  impl_->paths.push_back(path);
  impl_->server.Get(
      path, [handler = std::move(handler)](const httplib::Request&, httplib::Response& res) {
        try {
          HttpReply reply = handler();
          res.status = reply.status;
          res.set_content(reply.body, reply.content_type.c_str());
        } catch (const std::exception& e) {
          res.status = 500;
          res.set_content(std::string("error: ") + e.what() + "\n", "text/plain; charset=utf-8");
        }
      });
}

void HttpServer::start() {
  if (options_.token.empty())
    throw Error(ErrorCode::kInvalidArgument, "an HTTP server needs the cluster token");
  auto& svr = impl_->server;
  const std::string token = options_.token;
  const std::string cookie = impl_->cookie;
  svr.set_pre_routing_handler([token, cookie](const httplib::Request& req, httplib::Response& res) {
    using R = httplib::Server::HandlerResponse;
    if (req.path == "/login") {
      if (token::constant_time_equal(req.get_param_value("token"), token)) {
        res.set_header("Set-Cookie", std::string(kCookieName) + "=" + cookie +
                                         "; HttpOnly; SameSite=Strict; Path=/");
        res.set_redirect(safe_next(req.get_param_value("next")), 303);
        return R::Handled;
      }
    } else {
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) == 0 && token::constant_time_equal(auth.substr(7), token))
        return R::Unhandled;
      const std::string c = cookie_value(req.get_header_value("Cookie"), kCookieName);
      if (!c.empty() && token::constant_time_equal(c, cookie)) return R::Unhandled;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer realm=\"troupe\"");
    res.set_content("401 unauthorized: present the cluster token (Authorization: Bearer TOKEN)\n",
                    "text/plain; charset=utf-8");
    return R::Handled;
  });
  auto paths = impl_->paths;
  svr.Get("/", [paths](const httplib::Request&, httplib::Response& res) {
    std::string body = "troupe endpoints:\n";
    for (const auto& p : paths) body += "  " + p + "\n";
    res.set_content(body, "text/plain; charset=utf-8");
  });
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which lets a second server of this
  // user bind the same port and take half its connections instead of failing.
  svr.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  svr.set_read_timeout(options_.read_timeout);
  svr.set_write_timeout(options_.write_timeout);
  svr.set_keep_alive_timeout(std::max<time_t>(1, options_.read_timeout.count() / 1000));
  svr.set_keep_alive_max_count(16);
  svr.set_payload_max_length(options_.payload_max_bytes);
  const size_t threads = std::max<size_t>(1, options_.threads);
  const size_t queued = options_.max_queued;
  svr.new_task_queue = [threads, queued] { return new BoundedPool(threads, queued); };
  if (options_.port == 0) {
    port_ = svr.bind_to_any_port(options_.address);
  } else {
    port_ = svr.bind_to_port(options_.address, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0)
    throw Error(ErrorCode::kInvalidArgument, "cannot listen for HTTP on " + options_.address + ":" +
                                                 std::to_string(options_.port) +
                                                 " (address in use or not on this host?)");
  listener_ = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() before the loop runs would be lost: wait until it does.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!svr.is_running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::string HttpServer::address() const { return options_.address + ":" + std::to_string(port_); }

void HttpServer::stop() {
  if (!listener_.joinable()) return;
  impl_->server.stop();
  listener_.join();
}

std::unique_ptr<HttpServer> serve_metrics(const metrics::Registry& registry,
                                          HttpServerOptions options) {
  auto server = std::make_unique<HttpServer>(std::move(options));
  server->get("/metrics", [&registry] {
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", registry.render()};
  });
  server->start();
  return server;
}

}  // namespace troupe::transport
