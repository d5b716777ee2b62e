#include "agent/agent.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <deque>
#include <fstream>
#include <thread>

#include "agent/fork_server.h"
#include "agent/gpu_probe.h"
#include "agent/port_book.h"
#include "agent/worker_process.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "common/proc_stats.h"
#include "common/token.h"
#include "store/host_store.h"
#include "store/shm_object.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "wire/control.h"
#include "wire/head_protocol.h"

namespace troupe::agent {
namespace {

// True when this process's command line is its program name alone (/proc/self/cmdline).
bool started_without_args() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return std::count(cmdline.begin(), cmdline.end(), '\0') <= 1;
}

namespace control = wire::control;

constexpr std::chrono::milliseconds kConnectTimeout{10000};
constexpr std::chrono::milliseconds kShutdownGrace{2000};
// How many exited workers the agent remembers (for stop_worker and list_workers).
constexpr size_t kExitsKept = 64;

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

control::WorkerExited exited_event(const std::string& name, pid_t pid, const process::ExitStatus& s,
                                   const std::vector<std::string>& tail) {
  control::WorkerExited e;
  e.name = name;
  e.pid = pid;
  e.status = s.describe();
  if (s.exited) e.exit_code = s.code;
  if (s.signal) e.signal = s.signal;
  e.stderr_tail = tail;
  return e;
}

class Agent {
 public:
  explicit Agent(AgentConfig config)
      : config_(std::move(config)), signals_(io_), ports_(config_.address) {}

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
      fs::open_private_dir(config_.socket_dir, true);
      unix_listener_ = transport::Listener::start(
          io_, "unix:" + config_.socket_dir + "/agent-" + config_.host_name + ".sock",
          config_.token, on_conn);
      tcp_listener_ =
          transport::Listener::start(io_, "tcp:" + config_.address + ":0", config_.token, on_conn);
      store_ = std::make_unique<store::HostStore>(store::store_dir(), ::getpid(),
                                                  config_.object_store_memory, config_.host_name);
      if (size_t n = store_->sweep())
        TROUPE_LOG(Info) << "removed " << n << " store object(s) of agents that are gone";
    } catch (const Error& e) {
      TROUPE_LOG(Error) << e.message();
      return 3;
    }
    // Embedded: the fork server now (overlapping start-up); standing: on first use, if ever.
    if (config_.fork_server && !config_.standing) fork_server_for(env::self_executable());
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
    fork_server_.reset();  // FS-5: it exits on its socket's EOF; waited for
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
                                  << "): " << workers_.size()
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
            head_->start_heartbeat(config_.heartbeat_interval, config_.heartbeat_timeout);
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
    if (!owner || shutting_down_) return;
    size_t n = 0;
    for (auto& [name, w] : workers_)
      if (w.owner == owner && !w.process->exited()) {
        w.process->stop(kShutdownGrace);
        ++n;
      }
    if (n > 0)
      TROUPE_LOG(Warning) << "the driver at " << owner->peer() << " is gone (" << reason.message()
                          << "): stopping its " << n << " worker(s)";
  }

  // `from`: the client connection the request came on (empty for the head's).
  void handle(wire::Request&& r, const transport::Responder& resp,
              const std::weak_ptr<transport::RpcPeer>& from) {
    try {
      if (r.method == control::StartWorker::kMethod)
        return start_worker(control::StartWorker::from(r.kwargs), resp, from);
      if (r.method == control::StopWorker::kMethod)
        return stop_worker(control::StopWorker::from(r.kwargs), resp);
      if (r.method == "list_workers") return list_workers(resp);
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
                    "' (start_worker, stop_worker, list_workers, reserve_ports, "
                    "release_ports, memory, gpu_state, store_reserve, store_free, store_usage, "
                    "shutdown, ping)"));
    } catch (const Error& e) {
      resp.fail(Error(e.code() == ErrorCode::kProtocol ? ErrorCode::kInvalidArgument : e.code(),
                      "agent " + config_.host_name + ": " + r.method + ": " + e.message()));
    }
  }

  // The fork server of `executable`, started on first use; null when none serves it. Only the
  // agent's own executable can, and only when the agent was started without arguments (a C++
  // driver re-executed): an agent run as `python3 -c ...` would start a bare interpreter.
  ForkServer* fork_server_for(const std::string& executable) {
    if (!config_.fork_server || executable != env::self_executable() || !started_without_args())
      return nullptr;
    if (!fork_server_)
      fork_server_ = std::make_unique<ForkServer>(executable, env::to_strings(env::current()));
    return fork_server_->usable() ? fork_server_.get() : nullptr;
  }

  std::vector<int> choose_gpus(const control::StartWorker& request) {
    std::vector<int> gpus = request.gpus;
    for (int g : gpus) {
      bool declared = false;
      for (int d : config_.gpu_ids) declared = declared || d == g;
      if (!declared)
        throw Error(ErrorCode::kResourceUnavailable,
                    "GPU " + std::to_string(g) + " is not one of the " +
                        std::to_string(config_.gpu_ids.size()) + " GPUs of " + config_.host_name);
    }
    int64_t want = request.num_gpus;
    if (want > 0 && gpus.empty()) {
      std::map<int, int> users;
      for (int d : config_.gpu_ids) users[d] = 0;
      for (const auto& [name, w] : workers_)
        if (!w.process->exited())
          for (int g : w.gpus) users[g]++;
      for (int d : config_.gpu_ids)
        if (users[d] == 0 && static_cast<int64_t>(gpus.size()) < want) gpus.push_back(d);
      if (static_cast<int64_t>(gpus.size()) < want)
        throw Error(ErrorCode::kResourceUnavailable,
                    "asked for " + std::to_string(want) + " GPUs on " + config_.host_name +
                        ", which has " + std::to_string(config_.gpu_ids.size()) + " (" +
                        std::to_string(gpus.size()) + " free)");
    }
    return gpus;
  }

  void start_worker(const control::StartWorker& request, const transport::Responder& resp,
                    const std::weak_ptr<transport::RpcPeer>& owner) {
    const std::string& name = request.name;
    if (name.empty()) throw Error(ErrorCode::kInvalidArgument, "a worker needs a name");
    if (!fs::valid_component(name))
      throw Error(ErrorCode::kInvalidArgument,
                  "bad worker name '" + name +
                      "': it names the log file, so it must not be '.', "
                      "'..' or hold '/' or control characters");
    if (workers_.count(name))
      throw Error(ErrorCode::kInvalidArgument, "a worker named '" + name + "' is running");
    std::vector<int> gpus = choose_gpus(request);

    WorkerLaunch launch;
    launch.name = name;
    launch.executable = request.executable.empty() ? env::self_executable() : request.executable;
    launch.args = request.args;
    launch.wrapper = request.wrapper;
    launch.log_dir_fd = logs_dir_.get();
    launch.log_name = name + ".log";
    launch.log_path = config_.session_dir + "/logs/" + launch.log_name;
    launch.log_to_terminal = config_.log_to_terminal && request.log_to_terminal;
    if (config_.standing && request.log_to_terminal)
      launch.on_line = [owner, name](const std::string& line, bool is_stderr) {
        if (auto o = owner.lock())
          o->send_event(control::WorkerLog::kEvent,
                        control::WorkerLog{name, 0, is_stderr, {line}}.to_value());
      };

    // The driver sends the whole environment (its own, taken when the worker or its group was
    // created): this host's agent environment is not the user's.
    auto vars = request.env;
    std::string cuda;
    for (int g : gpus) cuda += (cuda.empty() ? "" : ",") + std::to_string(g);
    vars[worker_env::kCudaVisibleDevices] = cuda;
    vars[worker_env::kRole] = "worker";
    vars[worker_env::kName] = name;
    vars[worker_env::kHostName] = config_.host_name;
    vars[worker_env::kStoreOwner] = std::to_string(::getpid());
    std::string unix_ep = "unix:" + config_.socket_dir + "/" + config_.host_name + "-w" +
                          std::to_string(next_socket_++) + ".sock";
    vars[worker_env::kUnixEndpoint] = unix_ep;
    vars[worker_env::kTcpHost] = config_.address;
    vars.erase(launch_env::kToken);  // the token goes through a pipe (WorkerLaunch::token)
    launch.token = config_.token;
    launch.env = env::to_strings(vars);
    if (launch.wrapper.empty() && launch.args.empty())
      launch.fork_server = fork_server_for(launch.executable);

    auto proc = std::make_shared<WorkerProcess>(io_, launch);
    auto timeout = std::chrono::milliseconds(request.start_timeout_ms);
    auto timer = std::make_shared<asio::steady_timer>(io_, timeout);
    auto answered = std::make_shared<bool>(false);
    // The handlers live in the WorkerProcess: they hold it weakly, never in a cycle.
    std::weak_ptr<WorkerProcess> weak = proc;
    auto on_ready = [this, resp, weak, name, unix_ep, gpus, timer, answered,
                     log_path = launch.log_path](std::optional<std::string> line) {
      auto proc = weak.lock();
      if (*answered || !proc) return;
      if (!line || line->rfind("ready", 0) != 0) return;  // the exit handler reports the failure
      *answered = true;
      timer->cancel();
      std::string tcp = line->size() > 6 ? line->substr(6) : "";
      control::StartWorkerReply reply{proc->pid(), 0, unix_ep, tcp, gpus, log_path};
      reply.start_time = static_cast<int64_t>(proc->start_time());
      resp.reply(reply.to_value());
    };
    auto on_exit = [this, resp, weak, name, timer, answered](const process::ExitStatus& s) {
      auto proc = weak.lock();
      timer->cancel();
      if (!proc) return;
      if (!*answered) {
        *answered = true;
        std::string tail;
        for (const auto& l : proc->stderr_tail()) tail += "\n  " + l;
        resp.fail(Error(ErrorCode::kWorkerDied,
                        "worker '" + name + "' on " + config_.host_name + " (pid " +
                            std::to_string(proc->pid()) + ") exited before it was ready: " +
                            s.describe() + (tail.empty() ? "" : "; last stderr lines:" + tail)));
      }
      worker_exited(name, proc, s);
    };
    ports_.take(request.take_ports);
    proc->start(on_ready, on_exit);  // throws kExecutableNotFound
    auto owner_peer = owner.lock();
    workers_[name] = RunningWorker{proc, gpus, {}, unix_path(unix_ep), owner_peer.get()};
    timer->async_wait([this, resp, proc, name, answered, timeout](const asio::error_code& ec) {
      if (ec || *answered) return;
      *answered = true;
      resp.fail(Error(ErrorCode::kTimeout, "worker '" + name + "' on " + config_.host_name +
                                               " was not ready within " +
                                               std::to_string(timeout.count()) + " ms; killed"));
      proc->kill_now();
    });
  }

  void stop_worker(const control::StopWorker& request, const transport::Responder& resp) {
    const std::string& name = request.name;
    auto it = workers_.find(name);
    if (it == workers_.end()) {
      for (auto e = exits_.rbegin(); e != exits_.rend(); ++e)
        if (e->name == name) return resp.reply(control::StopWorkerReply{e->status}.to_value());
      throw Error(ErrorCode::kInvalidArgument,
                  "no worker named '" + name + "' on " + config_.host_name);
    }
    it->second.stop_waiters.push_back(resp);
    it->second.process->stop(std::chrono::milliseconds(request.grace_ms));
  }

  // Host memory and the resident memory of each running worker's process group.
  void memory(const transport::Responder& resp) {
    std::vector<pid_t> pgids;
    for (const auto& [name, w] : workers_) pgids.push_back(w.process->pid());
    auto rss = proc::process_group_rss(pgids);
    control::MemoryReply reply;
    for (const auto& [name, w] : workers_) reply.workers[name] = rss[w.process->pid()];
    auto mem = proc::read_meminfo();
    reply.total_bytes = mem.total_bytes;
    reply.available_bytes = mem.available_bytes;
    resp.reply(reply.to_value());
  }

  void list_workers(const transport::Responder& resp) {
    Array out;
    auto env_of = [](const WorkerLaunch& launch, const std::string& key) {
      for (const auto& kv : launch.env)
        if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=')
          return kv.substr(key.size() + 1);
      return std::string();
    };
    for (const auto& [name, w] : workers_)
      out.push_back(Map{{"name", name},
                        {"pid", static_cast<int64_t>(w.process->pid())},
                        {"alive", !w.process->exited()},
                        {"group", env_of(w.process->launch(), group_env::kGroup)},
                        {"rank", env_of(w.process->launch(), group_env::kRank)},
                        {"launch", w.process->from_fork_server() ? "fork_server" : "exec"}});
    for (const auto& e : exits_)
      out.push_back(Map{{"name", e.name}, {"pid", static_cast<int64_t>(e.pid)}, {"alive", false}});
    resp.reply(std::move(out));
  }

  void worker_exited(const std::string& name, const std::shared_ptr<WorkerProcess>& proc,
                     const process::ExitStatus& s) {
    Value event = exited_event(name, proc->pid(), s, proc->stderr_tail()).to_value();
    for (const auto& weak : clients_)
      if (auto c = weak.lock()) c->send_event(control::WorkerExited::kEvent, event);
    if (head_) head_->send_event(control::WorkerExited::kEvent, event);
    auto it = workers_.find(name);
    if (it != workers_.end() && it->second.process == proc) {
      for (const auto& waiter : it->second.stop_waiters)
        waiter.reply(control::StopWorkerReply{s.describe()}.to_value());
      // Forget it: the process object closes its log and pipes once their last reads ran. A
      // worker killed with SIGKILL could not remove its socket.
      ::unlink(it->second.socket_path.c_str());
      workers_.erase(it);
      exits_.push_back(Exit{name, proc->pid(), s.describe()});
      if (exits_.size() > kExitsKept) exits_.pop_front();
    }
    maybe_exit();
  }

  // Reaps every exited child. A worker's process group is killed first, while the worker is an
  // unreaped zombie: its pid, hence its group id, is still ours, and children it left behind in
  // the group die with it. After the reap the group id may be reused and is never signalled.
  void reap() {
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
      const pid_t pid = info.si_pid;
      std::shared_ptr<WorkerProcess> proc;
      for (auto& [name, w] : workers_)
        if (w.process->pid() == pid) proc = w.process;
      if (proc) process::kill_group(pid, SIGKILL);
      int status = 0;
      if (::waitpid(pid, &status, 0) != pid) return;
      if (proc)
        proc->on_reaped(status);  // may erase it from workers_
      else if (fork_server_)
        fork_server_->on_reaped(pid);
    }
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
    ::rmdir(config_.socket_dir.c_str());  // the last one out removes the directory
  }

  void begin_shutdown(int code) {
    if (shutting_down_) return;
    shutting_down_ = true;
    exit_code_ = code;
    if (unix_listener_) unix_listener_->close();
    if (tcp_listener_) tcp_listener_->close();
    for (auto& [name, w] : workers_) w.process->stop(kShutdownGrace);
    maybe_exit();
  }

  void maybe_exit() {
    if (!shutting_down_) return;
    if (workers_.empty()) io_.stop();
  }

  struct RunningWorker {
    std::shared_ptr<WorkerProcess> process;
    std::vector<int> gpus;
    std::vector<transport::Responder> stop_waiters;
    std::string socket_path;
    // The client connection that started it (identity only, never dereferenced).
    const transport::RpcPeer* owner = nullptr;
  };
  // An exited worker, remembered for stop_worker and list_workers.
  struct Exit {
    std::string name;
    pid_t pid;
    std::string status;
  };

  AgentConfig config_;
  asio::io_context io_;
  asio::signal_set signals_;
  std::shared_ptr<transport::Listener> unix_listener_, tcp_listener_;
  std::shared_ptr<transport::RpcPeer> head_;
  std::set<std::weak_ptr<transport::RpcPeer>, std::owner_less<>> clients_;
  std::map<std::string, RunningWorker> workers_;  // running (not reaped) only
  std::deque<Exit> exits_;                        // the last kExitsKept exits, oldest first
  fs::UniqueFd logs_dir_;
  PortBook ports_;
  std::unique_ptr<ForkServer> fork_server_;  // of the agent's own executable; see fork_server.h
  std::unique_ptr<store::HostStore> store_;
  int next_socket_ = 0;
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
  Agent agent(config);
  return agent.run();
}

}  // namespace troupe::agent
