#include "agent/agent.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <cstdio>
#include <deque>
#include <map>
#include <thread>

#include "agent/agent_metrics.h"
#include "agent/containment.h"
#include "agent/fork_server_choice.h"
#include "agent/gpu_probe.h"
#include "agent/port_book.h"
#include "agent/stack_sampler.h"
#include "agent/worker_table.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "common/proc_stats.h"
#include "common/process.h"
#include "common/token.h"
#include "store/host_store.h"
#include "store/shm_object.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "wire/control.h"
#include "wire/head_protocol.h"

namespace troupe::agent {
namespace {

namespace control = wire::control;

constexpr std::chrono::milliseconds kConnectTimeout{10000};
constexpr std::chrono::milliseconds kShutdownGrace{2000};
// The path of a "unix:PATH" endpoint; empty for others.
std::string unix_path(const std::string& endpoint) {
  return endpoint.rfind("unix:", 0) == 0 ? endpoint.substr(5) : std::string();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

class Agent {
 public:
  explicit Agent(AgentConfig config)
      : config_(std::move(config)),
        signals_(io_),
        ports_(config_.address),
        fork_servers_(config_.fork_server, config_.standing, config_.python_preload) {}

  int run() {
    log::set_role("agent:" + config_.host_name);
    auto on_conn = [this](std::shared_ptr<transport::Connection> c) { accept_client(c); };
    try {
      if (!fs::valid_component(config_.host_name))
        throw Error(ErrorCode::kInvalidArgument,
                    "bad host name '" + config_.host_name + "' (it names files)");
      // The session directory and its logs/ must be this user's alone (see private_dir.h).
      auto session = fs::open_private_dir(config_.session_dir, true);
      logs_dir_ =
          fs::open_private_dir_at(session.get(), "logs", true, config_.session_dir + "/logs");
      auto sockets = fs::open_private_dir(config_.socket_dir, true);
      stacks_dir_ = fs::open_private_dir_at(sockets.get(), "stacks", true, stacks_dir());
      unix_listener_ = transport::Listener::start(
          io_, "unix:" + config_.socket_dir + "/agent-" + config_.host_name + ".sock",
          config_.token, on_conn);
      tcp_listener_ =
          transport::Listener::start(io_, "tcp:" + config_.address + ":0", config_.token, on_conn);
      store_ = std::make_unique<store::HostStore>(store::store_dir(), ::getpid(),
                                                  config_.object_store_memory, config_.host_name);
      if (size_t n = store_->sweep())
        TROUPE_LOG(Info) << "removed " << n << " store object(s) of agents that are gone";
      if (config_.metrics_port >= 0) {
        metrics_ = std::make_unique<AgentMetrics>(*store_);
        std::string bound = metrics_->serve(config_.address, config_.metrics_port, config_.token);
        // Always printed (not a log line at a level): port 0 is only known from here.
        std::fprintf(stderr, "troupe agent metrics at http://%s/metrics\n", bound.c_str());
        std::fflush(stderr);
      }
      containment_ = Containment::create(env::get_or(agent_env::kCgroups, "1") != "0");
      table_ = std::make_unique<WorkerTable>(
          io_, worker_host(), ports_, *containment_,
          [this](const std::string& exe, const control::StartWorker& request) -> ForkServer* {
            if (request.python_fork)
              return fork_servers_.for_python(exe, request.args, request.env,
                                              request.python_preload);
            if (!request.args.empty()) return nullptr;
            return fork_servers_.for_start(exe, request.fork_server, request.env);
          },
          [this](const control::WorkerExited& e) { broadcast_exit(e); });
    } catch (const Error& e) {
      TROUPE_LOG(Error) << e.message();
      return 3;
    }
    // Embedded: the fork server now (overlapping start-up); standing: on first use, if ever.
    if (!config_.standing) fork_servers_.start_own();
    signals_.add(SIGCHLD);
    signals_.add(SIGTERM);
    signals_.add(SIGINT);
    signals_.add(SIGHUP);
    wait_signals();
    connect_head();
    io_.run();
    // Close every connection and let the closes run, so that no connection outlives the loop.
    if (head_) head_->close(Error(ErrorCode::kShutdown, "agent exiting"));
    for (const auto& weak : clients_)
      if (auto c = weak.lock()) c->close(Error(ErrorCode::kShutdown, "agent exiting"));
    io_.restart();
    io_.poll();
    if (metrics_) metrics_->stop();
    fork_servers_.reset();    // FS-5: each exits on its socket's EOF; waited for
    containment_->end_all();  // CT-3
    store_->release_all();
    remove_sockets();
    return exit_code_;
  }

 private:
  void wait_signals() {
    signals_.async_wait([this](const asio::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        reap();
      } else {
        TROUPE_LOG(Info) << "signal " << sig << ": stopping";
        begin_shutdown(0);
      }
      wait_signals();
    });
  }

  void connect_head() {
    transport::async_connect(
        io_, config_.head_endpoint, config_.token, kConnectTimeout,
        [this](std::shared_ptr<transport::Connection> c, const Error* error) {
          if (shutting_down_) {
            if (c) c->close(Error(ErrorCode::kShutdown, "agent exiting"));
            return;
          }
          if (error) {
            if (config_.standing && registered_once_) {
              TROUPE_LOG(Warning) << "cannot reach the head at " << config_.head_endpoint << " ("
                                  << error->message() << "); trying again";
              return retry_head();
            }
            TROUPE_LOG(Error) << "cannot reach the head at " << config_.head_endpoint << ": "
                              << error->message();
            begin_shutdown(4);
            return;
          }
          transport::RpcPeer::Handlers h;
          h.on_close = [this](const Error& reason) {
            if (shutting_down_) return;
            if (config_.standing && !config_.exit_without_head) {
              TROUPE_LOG(Warning) << "lost the head (" << reason.message()
                                  << "): " << table_->size()
                                  << " worker(s) keep running; registering again";
              head_ = nullptr;
              return retry_head();
            }
            TROUPE_LOG(Warning) << "lost the head (" << reason.message()
                                << "): stopping all workers";
            begin_shutdown(0);
          };
          h.on_request = [this](wire::Request&& r, const transport::Responder& resp) {
            handle(std::move(r), resp, {});
          };
          head_ = transport::RpcPeer::attach(c, wire::FrameLimits{}, std::move(h));
          if (config_.heartbeat_interval.count() > 0)
            head_->start_heartbeat(config_.heartbeat_interval, config_.heartbeat_timeout,
                                   [this](std::chrono::nanoseconds rtt) {
                                     if (metrics_) metrics_->on_heartbeat_round_trip(rtt);
                                   });
          control::RegisterAgent reg;
          reg.host_name = config_.host_name;
          reg.address = config_.address;
          reg.num_cpus = config_.num_cpus;
          reg.gpu_ids = config_.gpu_ids;
          reg.labels = config_.labels;
          reg.unix_endpoint = unix_listener_->endpoint();
          reg.tcp_endpoint = tcp_listener_->endpoint();
          reg.pid = ::getpid();
          reg.machine_id = env::machine_id();
          reg.network_id = env::network_id();
          reg.memory_bytes = proc::read_meminfo().total_bytes;
          reg.workers = table_->names();
          std::weak_ptr<transport::RpcPeer> weak = head_;
          head_->call(control::RegisterAgent::kMethod, reg.to_map())
              .then([this, weak](const Future<Value>& f) {
                std::optional<Error> refused;
                if (auto e = f.error()) refused = *e;
                asio::post(io_, [this, weak, refused] {
                  if (!refused) {
                    if (registered_once_) TROUPE_LOG(Info) << "registered with the head again";
                    registered_once_ = true;
                    return;
                  }
                  if (config_.standing && registered_once_) {
                    // The head may not have noticed yet that this host's old connection is gone.
                    TROUPE_LOG(Warning) << "the head refused registration (" << refused->message()
                                        << "); trying again";
                    if (auto h = weak.lock()) h->close(*refused);  // its close retries
                    return;
                  }
                  TROUPE_LOG(Error) << "the head refused registration: " << refused->message();
                  begin_shutdown(5);
                });
              });
        });
  }

  void retry_head() {
    auto timer = std::make_shared<asio::steady_timer>(io_, config_.reconnect_interval);
    timer->async_wait([this, timer](const asio::error_code& ec) {
      if (!ec && !shutting_down_) connect_head();
    });
  }

  void accept_client(std::shared_ptr<transport::Connection> c) {
    transport::RpcPeer::Handlers h;
    auto peer = std::make_shared<std::weak_ptr<transport::RpcPeer>>();
    h.on_request = [this, peer](wire::Request&& r, const transport::Responder& resp) {
      handle(std::move(r), resp, *peer);
    };
    auto key = std::make_shared<const void*>(nullptr);  // the client's identity for the store
    h.on_close = [this, peer, key](const Error& reason) {
      clients_.erase(*peer);
      store_->release_client(*key);
      shared_envs_.erase(*key);
      if (config_.standing) stop_workers_of(peer->lock().get(), reason);
    };
    auto p = transport::RpcPeer::attach(c, wire::FrameLimits{}, std::move(h));
    *peer = p;
    *key = p.get();
    clients_.insert(p);
    if (config_.standing && config_.heartbeat_interval.count() > 0)
      p->start_heartbeat(config_.heartbeat_interval, config_.heartbeat_timeout);
  }

  // The driver that started these workers is gone (its lease ended): stop them.
  void stop_workers_of(const transport::RpcPeer* owner, const Error& reason) {
    flush_starts();  // its last starts too
    if (!owner || shutting_down_) return;
    if (size_t n = table_->stop_all(owner, kShutdownGrace))
      TROUPE_LOG(Warning) << "the driver at " << owner->peer() << " is gone (" << reason.message()
                          << "): stopping its " << n << " worker(s)";
  }

  // `from`: the client connection the request came on (empty for the head's).
  void handle(wire::Request&& r, const transport::Responder& resp,
              const std::weak_ptr<transport::RpcPeer>& from) {
    try {
      if (r.method == control::StartWorker::kMethod)
        return start_worker(control::StartWorker::from(r.kwargs), resp, from);
      flush_starts();
      if (r.method == control::StopWorker::kMethod) {
        auto m = control::StopWorker::from(r.kwargs);
        return table_->stop(m.name, std::chrono::milliseconds(m.grace_ms),
                            [resp](const std::string& status) {
                              resp.reply(control::StopWorkerReply{status}.to_value());
                            });
      }
      if (r.method == "list_workers") return resp.reply(table_->list());
      if (r.method == control::DumpStacks::kMethod) {
        auto targets = table_->stack_targets(control::DumpStacks::from(r.kwargs).names);
        return sampler_.sample(
            std::move(targets), std::chrono::milliseconds(control::DumpStacks::kDeadlineMs),
            [resp](control::DumpStacksReply reply) { resp.reply(reply.to_value()); });
      }
      if (r.method == control::ReadLog::kMethod)
        return resp.reply(table_->read_log(control::ReadLog::from(r.kwargs)).to_value());
      if (store_->handle(r, resp, from.lock().get())) return;
      if (r.method == control::Shutdown::kMethod) {
        shutdown_requested_ = true;
        resp.reply(Value());
        return begin_shutdown(0);
      }
      if (r.method == "ping") return resp.reply(config_.host_name);
      if (r.method == control::Memory::kMethod) return memory(resp);
      if (r.method == control::GpuState::kMethod)
        return resp.reply(
            control::GpuState::reply(read_gpu_state(control::GpuState::from(r.kwargs).gpus)));
      if (r.method == control::ReservePorts::kMethod) {
        auto m = control::ReservePorts::from(r.kwargs);
        return resp.reply(
            control::ReservePorts::reply(ports_.reserve(m.owner, m.count, m.lo, m.hi)));
      }
      if (r.method == control::ReleasePorts::kMethod)
        return resp.reply(control::ReleasePorts::reply(
            static_cast<int64_t>(ports_.release(control::ReleasePorts::from(r.kwargs).owner))));
      resp.fail(
          Error(ErrorCode::kUnknownMethod,
                "agent " + config_.host_name + " has no method '" + r.method +
                    "' (start_worker, stop_worker, list_workers, read_log, dump_stacks, "
                    "reserve_ports, "
                    "release_ports, memory, gpu_state, store_reserve, store_free, store_usage, "
                    "shutdown, ping)"));
    } catch (const Error& e) {
      resp.fail(request_error(r.method, e));
    }
  }

  // What a client is told when its request `method` failed with `e`.
  Error request_error(const std::string& method, const Error& e) const {
    return Error(e.code() == ErrorCode::kProtocol ? ErrorCode::kInvalidArgument : e.code(),
                 "agent " + config_.host_name + ": " + method + ": " + e.message());
  }

  WorkerHost worker_host() const {
    WorkerHost h;
    h.host_name = config_.host_name;
    h.address = config_.address;
    h.session_dir = config_.session_dir;
    h.socket_dir = config_.socket_dir;
    h.stacks_dir = stacks_dir();
    h.token = config_.token;
    h.log_to_terminal = config_.log_to_terminal;
    h.gpu_ids = config_.gpu_ids;
    h.logs_dir_fd = logs_dir_.get();
    h.stacks_dir_fd = stacks_dir_.get();
    return h;
  }

  // Queues the start; flush_starts() runs the queue in one WorkerTable::start_many, after every
  // request that came in the same read (they are parsed in one go), so the fork server gets
  // them as one batch. Any other request flushes the queue first: requests still take effect
  // in the order they came.
  void start_worker(control::StartWorker request, const transport::Responder& resp,
                    const std::weak_ptr<transport::RpcPeer>& owner) {
    if (!request.shared_env_id.empty() && !add_shared_env(request, owner.lock().get()))
      return resp.fail(request_error(
          control::StartWorker::kMethod,
          Error(ErrorCode::kInvalidArgument,
                "worker '" + request.name + "' names shared environment '" + request.shared_env_id +
                    "', which this connection did not send among its last " +
                    std::to_string(control::StartWorker::kSharedEnvsKept))));
    WorkerTable::LineHandler on_line;
    if (config_.standing && request.log_to_terminal)
      on_line = [owner, name = request.name](const std::string& line, bool is_stderr) {
        if (auto o = owner.lock())
          o->send_event(control::WorkerLog::kEvent,
                        control::WorkerLog{name, 0, is_stderr, {line}}.to_value());
      };
    auto owner_peer = owner.lock();
    if (metrics_) metrics_->on_start_requested();
    WorkerTable::StartItem item;
    // A detached worker has no owner: no driver's leaving stops it (stop_workers_of).
    item.owner = request.detached ? nullptr : owner_peer.get();
    item.request = std::move(request);
    item.on_line = std::move(on_line);
    item.done = [this, resp](const control::StartWorkerReply* reply, const Error* e) {
      if (metrics_) {
        metrics_->on_start_done(reply != nullptr);
        metrics_->set_workers(table_->size());
      }
      if (reply)
        resp.reply(reply->to_value());
      else
        resp.fail(*e);
    };
    item.refused = [this, resp](const Error& e) {
      if (metrics_) metrics_->on_start_done(false);
      resp.fail(request_error(control::StartWorker::kMethod, e));
    };
    pending_starts_.push_back(std::move(item));
    if (pending_starts_.size() == 1) asio::post(io_, [this] { flush_starts(); });
  }

  // Puts the shared variables the start names into its env (over env's), keeping or refreshing
  // what its connection sent as the sender does (StartWorker::kSharedEnvsKept). False when the
  // connection never sent them.
  bool add_shared_env(control::StartWorker& request, const void* connection) {
    auto& recent = shared_envs_[connection];
    auto known = std::find_if(recent.begin(), recent.end(),
                              [&](const auto& e) { return e.first == request.shared_env_id; });
    std::shared_ptr<const std::map<std::string, std::string>> vars;
    if (!request.shared_env.empty())
      vars =
          std::make_shared<const std::map<std::string, std::string>>(std::move(request.shared_env));
    else if (known != recent.end())
      vars = known->second;
    if (known != recent.end()) recent.erase(known);
    if (!vars) return false;
    recent.emplace_back(request.shared_env_id, vars);
    if (recent.size() > control::StartWorker::kSharedEnvsKept) recent.pop_front();
    for (const auto& [k, v] : *vars) request.env[k] = v;
    request.shared_env.clear();
    return true;
  }

  void flush_starts() {
    if (pending_starts_.empty()) return;
    std::vector<WorkerTable::StartItem> starts;
    starts.swap(pending_starts_);
    table_->start_many(std::move(starts));
  }

  // Host memory and the resident memory of each running worker's process group.
  void memory(const transport::Responder& resp) {
    control::MemoryReply reply;
    reply.workers = table_->memory();
    auto mem = proc::read_meminfo();
    reply.total_bytes = mem.total_bytes;
    reply.available_bytes = mem.available_bytes;
    resp.reply(reply.to_value());
  }

  void broadcast_exit(const control::WorkerExited& exited) {
    if (metrics_) metrics_->on_exit(exited);
    Value event = exited.to_value();
    for (const auto& weak : clients_)
      if (auto c = weak.lock()) c->send_event(control::WorkerExited::kEvent, event);
    if (head_) head_->send_event(control::WorkerExited::kEvent, event);
  }

  // Reaps every exited child: workers through the table (which kills what they left behind
  // while they are zombies, CT-2), and anything else (the fork server, escaped processes).
  void reap() {
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
      const pid_t pid = info.si_pid;
      if (table_->reap_if_worker(pid)) continue;
      if (sampler_.reap_if_mine(pid)) continue;
      int status = 0;
      if (::waitpid(pid, &status, 0) != pid) break;
      fork_servers_.on_reaped(pid);
    }
    if (metrics_) metrics_->set_workers(table_->size());
    maybe_exit();
  }

  // On exit (every worker's socket is gone by then, and the listener removed the agent's own):
  // removes the head's socket when nothing listens on it any more (its driver was killed), and
  // the socket directory once it is empty.
  // Unless the driver asked for the shutdown (then it removes its own socket), the driver may be
  // dying still: a parent-death signal comes when the driver's thread that started the agent
  // ends, maybe before the driver's descriptors are closed. So the check is retried a while.
  void remove_sockets() {
    std::string head = unix_path(config_.head_endpoint);
    if (!head.empty() && head.rfind(config_.socket_dir + "/", 0) == 0) {
      auto deadline = Clock::now() + std::chrono::seconds(2);
      struct stat st;
      while (!shutdown_requested_ && ::lstat(head.c_str(), &st) == 0 &&
             !fs::stale_unix_socket(head) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (fs::stale_unix_socket(head)) ::unlink(head.c_str());
    }
    // The last one out removes the directories (each agent removed its workers' files).
    ::rmdir(stacks_dir().c_str());
    ::rmdir(config_.socket_dir.c_str());
  }

  std::string stacks_dir() const { return config_.socket_dir + "/stacks"; }

  void begin_shutdown(int code) {
    if (shutting_down_) return;
    flush_starts();  // started, then stopped with the rest, as they came before the shutdown
    shutting_down_ = true;
    exit_code_ = code;
    if (unix_listener_) unix_listener_->close();
    if (tcp_listener_) tcp_listener_->close();
    table_->stop_all(nullptr, kShutdownGrace);
    maybe_exit();
  }

  void maybe_exit() {
    if (!shutting_down_) return;
    if (table_->empty()) io_.stop();
  }

  AgentConfig config_;
  asio::io_context io_;
  asio::signal_set signals_;
  std::shared_ptr<transport::Listener> unix_listener_, tcp_listener_;
  std::shared_ptr<transport::RpcPeer> head_;
  std::set<std::weak_ptr<transport::RpcPeer>, std::owner_less<>> clients_;
  fs::UniqueFd logs_dir_, stacks_dir_;
  PortBook ports_;
  ForkServerChoice fork_servers_;
  std::unique_ptr<Containment> containment_;
  std::unique_ptr<WorkerTable> table_;  // after what it refers to: destroyed before them
  std::vector<WorkerTable::StartItem> pending_starts_;  // start_worker's queue
  // Per client connection (null: the head's), the shared environments it named last, oldest
  // first (add_shared_env); dropped when it closes.
  std::map<
      const void*,
      std::deque<std::pair<std::string, std::shared_ptr<const std::map<std::string, std::string>>>>>
      shared_envs_;
  StackSampler sampler_{io_};
  std::unique_ptr<store::HostStore> store_;
  std::unique_ptr<AgentMetrics> metrics_;  // after store_, which it reads: destroyed first
  bool shutting_down_ = false;
  bool registered_once_ = false;
  bool shutdown_requested_ = false;  // by a client (the driver), which is alive then
  int exit_code_ = 0;
};

}  // namespace

AgentConfig config_from_environment() {
  AgentConfig c;
  c.host_name = env::get_or(agent_env::kHostName, "host-0");
  c.address = env::get_or(agent_env::kAddress, "127.0.0.1");
  c.num_cpus = std::stod(env::get_or(agent_env::kNumCpus, "1"));
  for (const auto& g : split(env::get_or(agent_env::kGpuIds, ""), ','))
    c.gpu_ids.push_back(std::stoi(g));
  for (const auto& kv : split(env::get_or(agent_env::kLabels, ""), ',')) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) c.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  c.head_endpoint = env::get_or(agent_env::kHead, "");
  c.session_dir = env::get_or(agent_env::kSessionDir, "/tmp/troupe");
  c.socket_dir = env::get_or(agent_env::kSocketDir, c.session_dir + "/sockets");
  c.token = token::from_environment();
  c.log_to_terminal = env::get_or(agent_env::kLogToTerminal, "1") != "0";
  c.fork_server = env::get_or(agent_env::kForkServer, "1") != "0";
  c.python_preload = env::split_list(env::get_or(launch_env::kPythonPreload, ""), ',');
  c.object_store_memory = std::stoll(env::get_or(agent_env::kObjectStoreMemory, "0"));
  return c;
}

int run_agent(const AgentConfig& config) {
  if (config.token.empty()) {
    TROUPE_LOG(Error) << "no cluster token (TROUPE_TOKEN or TROUPE_TOKEN_FILE)";
    return 2;
  }
  if (config.head_endpoint.empty()) {
    TROUPE_LOG(Error) << "no head address (" << agent_env::kHead << ")";
    return 2;
  }
  process::raise_descriptor_limit();  // about four descriptors per worker
  Agent agent(config);
  return agent.run();
}

}  // namespace troupe::agent
