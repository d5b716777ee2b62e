#include "worker/worker_main.h"

#include <cxxabi.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <typeinfo>

#include "common/call_status.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/timeline.h"
#include "common/token.h"
#include "store/shm_object.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "troupe/worker_class.h"
#include "worker/method_loop.h"

namespace troupe::worker {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out.empty() ? "(none)" : out;
}

std::string current_exception_type() {
  const std::type_info* t = abi::__cxa_current_exception_type();
  if (!t) return "unknown exception";
  int status = 0;
  char* name = abi::__cxa_demangle(t->name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : t->name();
  std::free(name);
  return out;
}

// The object this worker hosts and the dispatch of calls to it. Runs in I/O handlers only, on
// whichever thread runs the io_context at the time (the I/O or the method thread, never both:
// ML-1).
class WorkerServer {
 public:
  WorkerServer(asio::io_context& io, MethodLoop& loop, std::string name)
      : io_(io), loop_(loop), name_(std::move(name)) {}

  void handle(wire::Request&& request, const transport::Responder& responder) {
    const std::string& m = request.method;
    if (!m.empty() && m[0] == '_' && m.rfind("__", 0) == 0)
      return handle_internal(request, responder);
    if (constructing_) {  // calls sent right behind __init__ wait for the constructor
      waiting_.emplace_back(std::move(request), responder);
      return;
    }
    if (!object_) {
      responder.fail(
          Error(init_error_ ? init_error_->code() : ErrorCode::kConstructorFailed,
                "worker '" + name_ + "' has no object: " +
                    (init_error_ ? init_error_->message() : "it was never constructed")));
      return;
    }
    auto it = class_->methods.find(m);
    if (it == class_->methods.end()) {
      std::vector<std::string> names;
      for (const auto& [n, info] : class_->methods) names.push_back(n);
      responder.fail(Error(ErrorCode::kUnknownMethod, "worker '" + name_ + "' (class " +
                                                          class_->name + ") has no method '" + m +
                                                          "'; its methods: " + join(names)));
      return;
    }
    std::string where = "method '" + m + "' of worker '" + name_ + "' (class " + class_->name + ")";
    try {  // arguments in the object store: map them (no copy; copy-on-write, shm_object.h)
      for (auto& [k, v] : request.kwargs) store::resolve_markers(v);
    } catch (const Error& e) {
      return responder.fail(Error(e.code(), where + ": argument: " + e.message()));
    }
    ResultStore results{store_threshold_, store_owner_};
    if (!class_->method_thread)
      return run_method(object_, it->first, it->second, request.kwargs, where, responder, results);
    loop_.post([object = object_, name = &it->first, method = &it->second,
                kwargs = std::move(request.kwargs), where, responder, results] {
      run_method(object, *name, *method, kwargs, where, responder, results);
    });
  }

  // The error a call fails with when its method failed with `e`.
  static Error failure(const Error& e, const std::string& where) {
    return e.code() == ErrorCode::kInvalidArgument
               ? e
               : Error(ErrorCode::kMethodFailed, where + " failed: " + e.message());
  }

  // Large results for a driver on this host go through the object store (threshold 0: never).
  struct ResultStore {
    size_t threshold = 0;
    pid_t owner = 0;
    void reply(const transport::Responder& responder, Value value) const {
      if (threshold > 0) store::export_large(value, threshold, owner);
      responder.reply(value);
    }
  };

  // The call's span on this worker's timeline, from `start_ns` (0: recording was off) to now.
  static void record_call(const std::string& name, int64_t start_ns, int64_t args_size) {
    if (start_ns == 0) return;
    auto e = timeline::make(timeline::Kind::kSpan, "call", name, start_ns,
                            timeline::now_ns() - start_ns);
    e.size = args_size;
    timeline::record(e);
  }

  // Runs one method call, records its span and replies; on the I/O thread or the method thread.
  // The call is on the call-status page while it runs (CS-1: calls of one worker never overlap).
  // The span ends when the method returned (or threw), before the reply leaves, so that on the
  // driver's aligned clock it lies inside the dispatch that waited for the reply.
  static void run_method(const std::shared_ptr<void>& object, const std::string& name,
                         const WorkerMethodInfo& method, const Map& kwargs,
                         const std::string& where, const transport::Responder& responder,
                         ResultStore results) {
    call_status::Scope running(name);
    const int64_t start_ns = timeline::enabled() ? timeline::now_ns() : 0;
    const int64_t args_size = start_ns ? timeline::payload_bytes(kwargs) : 0;
    struct Span {  // records once: at end(), or when the call threw
      const std::string& name;
      int64_t start_ns, args_size;
      bool ended = false;
      void end() {
        if (ended) return;
        ended = true;
        record_call(name, start_ns, args_size);
      }
      ~Span() { end(); }
    } span{name, start_ns, args_size};
    try {
      if (method.start) {   // replies when done, from whichever thread finishes it
        span.ended = true;  // an asynchronous method records when it completes
        method.start(object.get(), kwargs, where,
                     [where, responder, results, name, start_ns, args_size](
                         std::optional<Value> result, std::optional<Error> error) {
                       record_call(name, start_ns, args_size);
                       if (error)
                         responder.fail(failure(*error, where));
                       else
                         results.reply(responder, result ? std::move(*result) : Value());
                     });
      } else if (method.streaming) {
        StreamWriter stream([&responder](Value item) { responder.stream_item(item); });
        Value result = method.invoke(object.get(), kwargs, where, &stream);
        span.end();
        results.reply(responder, std::move(result));
      } else {
        Value result = method.invoke(object.get(), kwargs, where, nullptr);
        span.end();
        results.reply(responder, std::move(result));
      }
    } catch (const Error& e) {
      span.end();
      responder.fail(failure(e, where));
    } catch (const std::exception& e) {
      span.end();
      responder.fail(Error(ErrorCode::kMethodFailed,
                           where + " threw " + current_exception_type() + ": " + e.what()));
    } catch (...) {
      span.end();
      responder.fail(Error(ErrorCode::kMethodFailed, where + " threw " + current_exception_type()));
    }
  }

 private:
  void handle_internal(const wire::Request& request, const transport::Responder& responder) {
    if (request.method == "__init__") return construct(request, responder);
    if (request.method ==
        "__clock__") {  // the driver aligns clocks (controller/cluster_timeline.cc)
      responder.reply(Map{{"now_ns", timeline::now_ns()}});
      return;
    }
    if (request.method == "__timeline__") {
      Value v = timeline::to_value(timeline::snapshot());
      v.as_map().emplace_back("now_ns", timeline::now_ns());
      responder.reply(v);
      return;
    }
    if (request.method == "__ping__") {
      responder.reply(Map{{"name", name_}, {"pid", static_cast<int64_t>(::getpid())}});
      return;
    }
    if (request.method == "__shutdown__") {
      responder.reply(Value());
      asio::post(io_, [this] { io_.stop(); });
      return;
    }
    responder.fail(Error(ErrorCode::kUnknownMethod,
                         "worker '" + name_ + "' has no internal method '" + request.method + "'"));
  }

  void construct(const wire::Request& request, const transport::Responder& responder) {
    const Value* cls = nullptr;
    const Value* args = nullptr;
    for (const auto& [k, v] : request.kwargs) {
      if (k == "class") cls = &v;
      if (k == "args") args = &v;
      if (k == "timeline" && v.is_bool()) timeline::set_enabled(v.as_bool());
      // The driver shares this host's object store: large results go through it.
      if (k == "store_threshold" && v.is_int() && v.as_int() > 0) {
        if (auto owner = env::get(worker_env::kStoreOwner)) {
          store_threshold_ = static_cast<size_t>(v.as_int());
          store_owner_ = static_cast<pid_t>(std::stol(*owner));
        }
      }
    }
    if (!cls || !cls->is_string() || !args || !args->is_map())
      return responder.fail(Error(ErrorCode::kProtocol, "__init__ needs class and args"));
    if (object_ || constructing_)
      return responder.fail(
          Error(ErrorCode::kInvalidArgument, "worker '" + name_ + "' is already constructed"));
    const WorkerClassInfo* info = nullptr;
    try {
      info = find_worker_class(cls->as_string());  // a class resolver may fail
    } catch (const Error& e) {
      init_error_ = e;
      return responder.fail(*init_error_);
    }
    if (!info) {
      init_error_ = Error(ErrorCode::kUnknownClass,
                          "worker '" + name_ + "': no worker class '" + cls->as_string() +
                              "' is registered in " + env::self_executable() +
                              " (registered: " + join(registered_worker_class_names()) + ")");
      return responder.fail(*init_error_);
    }
    std::string where = "constructor of class " + info->name + " on worker '" + name_ + "'";
    if (!info->construct) {
      init_error_ =
          Error(ErrorCode::kConstructorFailed,
                where + ": the class declares no constructor and is not default-constructible");
      return responder.fail(*init_error_);
    }
    constructing_ = true;
    if (!info->method_thread) return finish_construct(info, args->as_map(), where, responder);
    loop_.post([this, info, kwargs = args->as_map(), where, responder] {
      auto [object, error] = try_construct(info, kwargs, where);
      asio::post(io_, [this, info, object = std::move(object), error = std::move(error),
                       responder]() mutable {
        finish(info, std::move(object), std::move(error), responder);
      });
    });
  }

  void finish_construct(const WorkerClassInfo* info, const Map& kwargs, const std::string& where,
                        const transport::Responder& responder) {
    auto [object, error] = try_construct(info, kwargs, where);
    finish(info, std::move(object), std::move(error), responder);
  }

  // Runs the constructor; thread-safe (touches no member).
  static std::pair<std::shared_ptr<void>, std::optional<Error>> try_construct(
      const WorkerClassInfo* info, const Map& kwargs, const std::string& where) {
    const int64_t start_ns = timeline::now_ns();
    struct Span {
      int64_t start_ns;
      ~Span() {
        timeline::record(timeline::make(timeline::Kind::kSpan, "phase", "constructor", start_ns,
                                        timeline::now_ns() - start_ns));
      }
    } span{start_ns};
    try {
      return {info->construct(kwargs, where), std::nullopt};
    } catch (const Error& e) {
      return {nullptr,
              e.code() == ErrorCode::kInvalidArgument
                  ? e
                  : Error(ErrorCode::kConstructorFailed, where + " failed: " + e.message())};
    } catch (const std::exception& e) {
      return {nullptr, Error(ErrorCode::kConstructorFailed,
                             where + " threw " + current_exception_type() + ": " + e.what())};
    } catch (...) {
      return {nullptr,
              Error(ErrorCode::kConstructorFailed, where + " threw " + current_exception_type())};
    }
  }

  // I/O thread: records the outcome of the constructor and replies.
  void finish(const WorkerClassInfo* info, std::shared_ptr<void> object, std::optional<Error> error,
              const transport::Responder& responder) {
    constructing_ = false;
    if (error) {
      init_error_ = std::move(error);
      responder.fail(*init_error_);
    } else {
      object_ = std::move(object);
      class_ = info;
      log::set_role("worker:" + name_ + " (" + info->name + ")");
      responder.reply(Value());
    }
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& [request, waiting_responder] : waiting)
      handle(std::move(request), waiting_responder);
  }

  asio::io_context& io_;
  MethodLoop& loop_;
  std::string name_;
  const WorkerClassInfo* class_ = nullptr;
  std::shared_ptr<void> object_;
  std::optional<Error> init_error_;
  bool constructing_ = false;
  size_t store_threshold_ = 0;  // large results through the store (0: never; see ResultStore)
  pid_t store_owner_ = 0;
  // Calls that arrived while the constructor ran on the method thread, in arrival order.
  std::vector<std::pair<wire::Request, transport::Responder>> waiting_;
};

}  // namespace

int run_worker_main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string name = env::get_or(worker_env::kName, "worker");
  log::set_role("worker:" + name);
  std::string token;
  try {
    token = token::from_environment();
  } catch (const Error& e) {
    TROUPE_LOG(Error) << e.message();
    return 2;
  }
  ::unsetenv(launch_env::kToken);
  if (auto page = env::get(worker_env::kCallStatus)) {
    try {
      call_status::open(*page);
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << e.message() << " (`troupe stack` will not show its calls)";
    }
    ::unsetenv(worker_env::kCallStatus);  // the page is this process's, not its children's
  }
  // Where Yama restricts ptrace to descendants, the agent's eu-stack may still read this
  // process's stacks (`troupe stack`): a no-op elsewhere.
  if (auto agent = env::get(worker_env::kStoreOwner)) ::prctl(PR_SET_PTRACER, std::stol(*agent));
  if (token.empty()) {
    TROUPE_LOG(Error) << "no cluster token (TROUPE_TOKEN_FD, TROUPE_TOKEN or TROUPE_TOKEN_FILE)";
    return 2;
  }
  asio::io_context io(1);
  // Never destroyed: its method thread may still run a task (and hold Python objects) when this
  // returns; the process exits right after. Kept reachable from a static so that LeakSanitizer
  // does not report it (a leak report turns a clean SIGTERM exit into exit code 1).
  static MethodLoop* never_destroyed = nullptr;
  never_destroyed = new MethodLoop(io);
  MethodLoop* loop = never_destroyed;
  WorkerServer server(io, *loop, name);
  std::vector<std::weak_ptr<transport::RpcPeer>> peers;
  auto on_connection = [&server, &peers](std::shared_ptr<transport::Connection> conn) {
    transport::RpcPeer::Handlers h;
    h.on_request = [&server](wire::Request&& r, const transport::Responder& responder) {
      server.handle(std::move(r), responder);
    };
    // Connections come and go (the driver's, and `troupe timeline`'s each time it runs).
    std::erase_if(peers, [](const std::weak_ptr<transport::RpcPeer>& p) { return p.expired(); });
    peers.push_back(transport::RpcPeer::attach(conn, wire::FrameLimits{}, std::move(h)));
  };
  std::vector<std::shared_ptr<transport::Listener>> listeners;
  std::string tcp_endpoint;
  try {
    if (auto unix_ep = env::get(worker_env::kUnixEndpoint))
      listeners.push_back(transport::Listener::start(io, *unix_ep, token, on_connection));
    if (auto host = env::get(worker_env::kTcpHost)) {
      listeners.push_back(
          transport::Listener::start(io, "tcp:" + *host + ":0", token, on_connection));
      tcp_endpoint = listeners.back()->endpoint();
    }
  } catch (const Error& e) {
    TROUPE_LOG(Error) << e.message();
    return 3;
  }
  if (auto fd = env::get(worker_env::kReadyFd)) {
    int ready_fd = std::atoi(fd->c_str());
    std::string line = "ready " + tcp_endpoint + "\n";
    ssize_t unused = ::write(ready_fd, line.data(), line.size());
    (void)unused;
    ::close(ready_fd);
    ::unsetenv(worker_env::kReadyFd);
  }
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&io](const asio::error_code& ec, int) {
    if (!ec) io.stop();
  });
  loop->run_io();  // ML-4: returns once the io_context stopped and the method thread let go
  // Close every connection and let the closes run, so that no connection outlives the loop.
  for (auto& l : listeners) l->close();
  for (auto& weak : peers)
    if (auto p = weak.lock()) p->close(Error(ErrorCode::kShutdown, "worker exiting"));
  io.restart();
  io.poll();
  listeners.clear();
  std::fflush(stdout);
  return 0;
}

}  // namespace troupe::worker
