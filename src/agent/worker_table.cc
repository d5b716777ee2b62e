#include "agent/worker_table.h"

#include <sys/wait.h>
#include <unistd.h>

#include <asio/steady_timer.hpp>

#include "agent/port_book.h"
#include "common/call_status.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/private_dir.h"
#include "common/proc_stats.h"
#include "transport/tls.h"

namespace troupe::agent {
namespace {

std::string unix_path(const std::string& endpoint) {
  return endpoint.rfind("unix:", 0) == 0 ? endpoint.substr(5) : std::string();
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

std::string env_of(const WorkerLaunch& launch, const std::string& key) {
  for (const auto& kv : launch.env)
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=')
      return kv.substr(key.size() + 1);
  return std::string();
}

}  // namespace

WorkerTable::WorkerTable(asio::io_context& io, WorkerHost host, PortBook& ports,
                         Containment& containment, ForkServerFor fork_server_for,
                         ExitHandler on_exited)
    : io_(io),
      host_(std::move(host)),
      ports_(ports),
      containment_(containment),
      fork_server_for_(std::move(fork_server_for)),
      on_exited_(std::move(on_exited)) {}

std::vector<int> WorkerTable::choose_gpus(const control::StartWorker& request,
                                          const std::vector<int>& also_taken) const {
  std::vector<int> gpus = request.gpus;
  for (int g : gpus) {
    bool declared = false;
    for (int d : host_.gpu_ids) declared = declared || d == g;
    if (!declared)
      throw Error(ErrorCode::kResourceUnavailable,
                  "GPU " + std::to_string(g) + " is not one of the " +
                      std::to_string(host_.gpu_ids.size()) + " GPUs of " + host_.host_name);
  }
  int64_t want = request.num_gpus;
  if (want > 0 && gpus.empty()) {
    std::map<int, int> users;
    for (int d : host_.gpu_ids) users[d] = 0;
    for (const auto& [name, w] : workers_)
      if (!w.process->exited())
        for (int g : w.gpus) users[g]++;
    for (int g : also_taken) users[g]++;
    for (int d : host_.gpu_ids)
      if (users[d] == 0 && static_cast<int64_t>(gpus.size()) < want) gpus.push_back(d);
    if (static_cast<int64_t>(gpus.size()) < want)
      throw Error(ErrorCode::kResourceUnavailable,
                  "asked for " + std::to_string(want) + " GPUs on " + host_.host_name +
                      ", which has " + std::to_string(host_.gpu_ids.size()) + " (" +
                      std::to_string(gpus.size()) + " free)");
  }
  return gpus;
}

WorkerLaunch WorkerTable::make_launch(const control::StartWorker& request,
                                      const std::vector<int>& gpus, const std::string& unix_ep,
                                      const std::string& container, LineHandler on_line) const {
  WorkerLaunch launch;
  launch.name = request.name;
  launch.executable = request.executable.empty() ? env::self_executable() : request.executable;
  launch.args = request.args;
  launch.wrapper = request.wrapper;
  launch.log_dir_fd = host_.logs_dir_fd;
  launch.log_name = request.name + ".log";
  launch.log_path = host_.session_dir + "/logs/" + launch.log_name;
  launch.log_to_terminal = host_.log_to_terminal && request.log_to_terminal;
  launch.on_line = std::move(on_line);
  // The driver sends the whole environment (its own, taken when the worker or its group was
  // created): this host's agent environment is not the user's.
  auto vars = request.env;
  std::string cuda;
  for (int g : gpus) cuda += (cuda.empty() ? "" : ",") + std::to_string(g);
  vars[worker_env::kCudaVisibleDevices] = cuda;
  vars[worker_env::kRole] = "worker";
  vars[worker_env::kName] = request.name;
  vars[worker_env::kHostName] = host_.host_name;
  vars[worker_env::kStoreOwner] = std::to_string(::getpid());
  vars[worker_env::kUnixEndpoint] = unix_ep;
  vars[worker_env::kTcpHost] = host_.address;
  vars[worker_env::kContainer] = container;
  if (host_.stacks_dir_fd >= 0) {  // created in start()
    vars[worker_env::kCallStatus] = host_.stacks_dir + "/" + request.name + ".status";
    vars[worker_env::kPythonStacks] = host_.stacks_dir + "/" + request.name + ".pystacks";
    vars[worker_env::kPythonStacksSignal] = std::to_string(python_stacks_signal());
  }
  if (std::string tls = transport::tls_dir(); !tls.empty()) {  // this agent's TLS
    vars[launch_env::kTlsDir] = tls;
    std::string name = transport::tls_name();
    vars[launch_env::kTlsName] = name.empty() ? host_.host_name : name;
  }
  vars.erase(launch_env::kToken);  // the token goes through a pipe (WorkerLaunch::token)
  launch.token = host_.token;
  launch.env = env::to_strings(vars);
  if (launch.wrapper.empty() && fork_server_for_)
    launch.fork_server = fork_server_for_(launch.executable, request);
  return launch;
}

void WorkerTable::start(const control::StartWorker& request, const void* owner, LineHandler on_line,
                        StartHandler done) {
  std::optional<Error> refusal;
  std::vector<StartItem> one;
  one.push_back(StartItem{request, owner, std::move(on_line), std::move(done),
                          [&refusal](const Error& e) { refusal = e; }});
  start_many(std::move(one));
  if (refusal) throw *refusal;
}

// One start of start_many between its steps.
struct WorkerTable::Prepared {
  StartItem* item = nullptr;
  std::shared_ptr<WorkerProcess> proc;
  Container container;
  std::vector<int> gpus;
  std::string unix_ep;
  std::optional<ForkServer::Request> fork_request;
  std::optional<pid_t> forked;
  int64_t fork_batch = 0;  // how many starts its fork server got in the same batch
  // The start's deadline, running from prepare(), and its answer (null once answered).
  std::shared_ptr<asio::steady_timer> timer;
  std::shared_ptr<StartHandler> answer;
  std::chrono::milliseconds timeout{0};
};

std::shared_ptr<WorkerProcess> WorkerTable::prepare(StartItem& item, std::vector<Prepared>& batch,
                                                    Prepared& p) {
  const control::StartWorker& request = item.request;
  const std::string& name = request.name;
  if (name.empty()) throw Error(ErrorCode::kInvalidArgument, "a worker needs a name");
  if (!fs::valid_component(name))
    throw Error(ErrorCode::kInvalidArgument, "bad worker name '" + name +
                                                 "': it names the log file, so it must not be "
                                                 "'.', '..' or hold '/' or control characters");
  std::vector<int> batch_gpus;
  for (const auto& other : batch) {
    if (other.item->request.name == name)
      throw Error(ErrorCode::kInvalidArgument, "a worker named '" + name + "' is running");
    batch_gpus.insert(batch_gpus.end(), other.gpus.begin(), other.gpus.end());
  }
  if (workers_.count(name))
    throw Error(ErrorCode::kInvalidArgument, "a worker named '" + name + "' is running");
  p.gpus = choose_gpus(request, batch_gpus);
  p.unix_ep = "unix:" + host_.socket_dir + "/" + host_.host_name + "-w" +
              std::to_string(next_socket_++) + ".sock";
  p.container = containment_.open();
  WorkerLaunch launch =
      make_launch(request, p.gpus, p.unix_ep, p.container.id, std::move(item.on_line));
  launch.cgroup_procs_fd = p.container.procs.get();
  const std::string log_path = launch.log_path;

  auto proc = std::make_shared<WorkerProcess>(io_, std::move(launch));
  p.timeout = std::chrono::milliseconds(request.start_timeout_ms);
  auto timer = p.timer = std::make_shared<asio::steady_timer>(io_, p.timeout);
  auto answer = p.answer = std::make_shared<StartHandler>(std::move(item.done));
  // The handlers live in the WorkerProcess: they hold it weakly, never in a cycle.
  std::weak_ptr<WorkerProcess> weak = proc;
  auto on_ready = [this, name, weak, unix_ep = p.unix_ep, gpus = p.gpus, timer, answer,
                   log_path](std::optional<std::string> line) {
    auto proc = weak.lock();
    if (!*answer || !proc) return;
    if (!line || line->rfind("ready", 0) != 0) return;  // the exit handler reports the failure
    timer->cancel();
    std::string tcp = line->size() > 6 ? line->substr(6) : "";
    if (auto it = workers_.find(name); it != workers_.end() && it->second.process == proc)
      it->second.tcp_endpoint = tcp;  // for list()
    control::StartWorkerReply reply{proc->pid(), 0, unix_ep, tcp, gpus, log_path};
    reply.start_time = static_cast<int64_t>(proc->start_time());
    auto handler = std::move(*answer);
    *answer = nullptr;
    handler(&reply, nullptr);
  };
  auto on_exit = [this, weak, name, timer, answer](const process::ExitStatus& s) {
    auto proc = weak.lock();
    timer->cancel();
    if (!proc) return;
    if (*answer) {
      std::string tail;
      for (const auto& l : proc->stderr_tail()) tail += "\n  " + l;
      Error e(ErrorCode::kWorkerDied, "worker '" + name + "' on " + host_.host_name + " (pid " +
                                          std::to_string(proc->pid()) +
                                          ") exited before it was ready: " + s.describe() +
                                          (tail.empty() ? "" : "; last stderr lines:" + tail));
      auto handler = std::move(*answer);
      *answer = nullptr;
      handler(nullptr, &e);
    }
    exited(name, proc, s);
  };
  try {
    p.fork_request = proc->prepare(on_ready, on_exit);
  } catch (...) {
    containment_.end(p.container.id);  // empty: nothing joined it
    throw;                             // WT-1: the ports stay guarded
  }
  return proc;
}

void WorkerTable::finish(Prepared& p) {
  const control::StartWorker& request = p.item->request;
  const std::string name = request.name;
  ports_.take(request.take_ports);  // the worker may bind them as soon as it runs
  std::string group = env_of(p.proc->launch(), group_env::kGroup);
  std::string rank = env_of(p.proc->launch(), group_env::kRank);  // launch() empties the env
  try {
    p.proc->launch(p.forked);  // throws kExecutableNotFound
  } catch (...) {
    ports_.guard_again(request.take_ports);  // WT-1: no worker, so the ports stay guarded
    containment_.end(p.container.id);        // empty: nothing joined it
    throw;
  }
  p.container.procs.reset();
  auto proc = p.proc;
  Running running{proc, p.gpus, {}, unix_path(p.unix_ep), p.container.id, p.item->owner};
  running.fork_batch = p.fork_batch;
  running.group = std::move(group);
  running.rank = std::move(rank);
  workers_[name] = std::move(running);
  p.timer->async_wait(
      [this, answer = p.answer, proc, name, timeout = p.timeout](const asio::error_code& ec) {
        if (ec || !*answer) return;
        Error e(ErrorCode::kTimeout, "worker '" + name + "' on " + host_.host_name +
                                         " was not ready within " +
                                         std::to_string(timeout.count()) + " ms; killed");
        auto handler = std::move(*answer);
        *answer = nullptr;
        handler(nullptr, &e);
        proc->kill_now();
      });
}

void WorkerTable::start_many(std::vector<StartItem> items) {
  std::vector<Prepared> batch;
  batch.reserve(items.size());
  // Each fork server gets a worker's request as soon as it is prepared, so it forks that worker
  // while the next is prepared; the answers are read once all were sent.
  std::map<ForkServer*, std::vector<Prepared*>> submitted;
  for (auto& item : items) {
    Prepared p;
    p.item = &item;
    try {
      p.proc = prepare(item, batch, p);
    } catch (const Error& e) {
      item.refused(e);
      continue;
    }
    batch.push_back(std::move(p));
    Prepared& added = batch.back();
    ForkServer* server = added.proc->launch().fork_server;
    if (added.fork_request) {
      auto& sent = submitted[server];        // collect() below ends the batch of every server asked
      ports_.take(item.request.take_ports);  // the fork server may fork and run it at once
      if (server->submit(*added.fork_request)) sent.push_back(&added);
    }
  }
  for (auto& [server, starts] : submitted) {
    auto pids = server->collect();
    for (size_t i = 0; i < starts.size(); ++i) {
      starts[i]->forked = pids[i];
      if (pids[i]) starts[i]->fork_batch = static_cast<int64_t>(starts.size());
    }
  }
  for (auto& p : batch) {
    try {
      finish(p);
    } catch (const Error& e) {
      p.item->refused(e);
    }
  }
}

void WorkerTable::stop(const std::string& name, std::chrono::milliseconds grace,
                       std::function<void(const std::string& status)> done) {
  auto it = workers_.find(name);
  if (it == workers_.end()) {
    for (auto e = exits_.rbegin(); e != exits_.rend(); ++e)
      if (e->name == name) return done(e->status);
    throw Error(ErrorCode::kInvalidArgument,
                "no worker named '" + name + "' on " + host_.host_name);
  }
  it->second.stop_waiters.push_back(std::move(done));
  it->second.process->stop(grace);
}

size_t WorkerTable::stop_all(const void* owner, std::chrono::milliseconds grace) {
  size_t n = 0;
  for (auto& [name, w] : workers_)
    if ((!owner || w.owner == owner) && !w.process->exited()) {
      w.process->stop(grace);
      ++n;
    }
  return n;
}

bool WorkerTable::reap_if_worker(pid_t pid) {
  std::shared_ptr<WorkerProcess> proc;
  std::string container;
  for (auto& [name, w] : workers_)
    if (w.process->pid() == pid) {
      proc = w.process;
      container = w.container;
    }
  if (!proc) return false;
  // While the worker is an unreaped zombie its pid, hence its group id, is still ours: children
  // left in the group die with it; then everything in its container (CT-2).
  process::kill_group(pid, SIGKILL);
  containment_.end(container);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return true;
  proc->on_reaped(status);  // may erase it from workers_
  return true;
}

void WorkerTable::exited(const std::string& name, const std::shared_ptr<WorkerProcess>& proc,
                         const process::ExitStatus& s) {
  on_exited_(exited_event(name, proc->pid(), s, proc->stderr_tail()));
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.process != proc) return;
  auto waiters = std::move(it->second.stop_waiters);
  std::string group = std::move(it->second.group);
  // Forget it: the process object closes its log and pipes once their last reads ran. A worker
  // killed with SIGKILL could not remove its socket.
  ::unlink(it->second.socket_path.c_str());
  workers_.erase(it);
  if (host_.stacks_dir_fd >= 0) {
    ::unlinkat(host_.stacks_dir_fd, (name + ".status").c_str(), 0);
    ::unlinkat(host_.stacks_dir_fd, (name + ".pystacks").c_str(), 0);
  }
  exits_.push_back(Exit{name, std::move(group), proc->pid(), s.describe()});
  if (exits_.size() > kExitsKept) exits_.pop_front();
  for (const auto& waiter : waiters) waiter(s.describe());
}

Array WorkerTable::list() const {
  Array out;
  for (const auto& [name, w] : workers_) {
    // The call it runs, from its call-status page (empty: idle, or the page is unreadable).
    std::string call, why;
    int64_t call_ms = 0;
    if (host_.stacks_dir_fd >= 0 && !w.process->exited())
      if (auto snap = call_status::read(host_.stacks_dir_fd, name + ".status", why)) {
        call = snap->method;
        call_ms = snap->call_ns / 1000000;
      }
    out.push_back(Map{{"name", name},
                      {"pid", static_cast<int64_t>(w.process->pid())},
                      {"alive", !w.process->exited()},
                      {"group", w.group},
                      {"rank", w.rank},
                      {"launch", w.process->from_fork_server() ? "fork_server" : "exec"},
                      {"fork_batch", w.fork_batch},
                      {"tcp", w.tcp_endpoint},
                      {"call", call},
                      {"call_ms", call_ms}});
  }
  for (const auto& e : exits_)
    out.push_back(Map{{"name", e.name},
                      {"pid", static_cast<int64_t>(e.pid)},
                      {"alive", false},
                      {"group", e.group}});
  return out;
}

control::ReadLogReply WorkerTable::read_log(const control::ReadLog& request) const {
  control::ReadLogReply reply;
  reply.name = request.name;
  bool known = false;
  if (auto it = workers_.find(request.name); it != workers_.end()) {
    known = true;
    reply.pid = it->second.process->pid();
    reply.alive = !it->second.process->exited();
  } else {
    for (auto e = exits_.rbegin(); e != exits_.rend() && !known; ++e)
      if (e->name == request.name) {
        known = true;
        reply.pid = e->pid;
      }
  }
  if (!known) {
    std::string names;
    for (const auto& [name, w] : workers_) names += (names.empty() ? "" : ", ") + name;
    for (const auto& e : exits_) names += (names.empty() ? "" : ", ") + e.name + " (exited)";
    throw Error(ErrorCode::kInvalidArgument,
                "no worker named '" + request.name + "' on " + host_.host_name +
                    " (workers: " + (names.empty() ? "none" : names) + ")");
  }
  const std::string file = request.name + ".log";
  LogPiece piece =
      read_log_piece(host_.logs_dir_fd, file, host_.session_dir + "/logs/" + file, request);
  reply.offset = piece.offset;
  reply.next_offset = piece.next_offset;
  reply.size = piece.size;
  reply.data = std::move(piece.data);
  return reply;
}

std::vector<StackTarget> WorkerTable::stack_targets(const std::vector<std::string>& names) const {
  std::vector<StackTarget> out;
  auto target = [&](const std::string& name, const Running& w) {
    StackTarget t;
    t.labels.name = name;
    t.labels.host = host_.host_name;
    t.labels.group = w.group;
    const std::string& rank = w.rank;
    t.labels.rank = -1;
    if (!rank.empty() && rank.find_first_not_of("0123456789") == std::string::npos &&
        rank.size() < 10)
      t.labels.rank = std::stoll(rank);
    t.labels.pid = w.process->pid();
    t.stacks_dir_fd = host_.stacks_dir_fd;
    t.status_file = name + ".status";
    t.python_file = name + ".pystacks";
    return t;
  };
  for (const auto& name : names) {
    auto it = workers_.find(name);
    if (it == workers_.end() || it->second.process->exited()) {
      std::string running;
      for (const auto& [n, w] : workers_) running += (running.empty() ? "" : ", ") + n;
      throw Error(ErrorCode::kInvalidArgument,
                  "no running worker named '" + name + "' on " + host_.host_name +
                      " (running: " + (running.empty() ? "none" : running) + ")");
    }
    out.push_back(target(name, it->second));
  }
  if (names.empty())
    for (const auto& [name, w] : workers_)
      if (!w.process->exited()) out.push_back(target(name, w));
  return out;
}

std::vector<std::string> WorkerTable::names() const {
  std::vector<std::string> out;
  out.reserve(workers_.size());
  for (const auto& [name, w] : workers_) out.push_back(name);
  return out;
}

std::map<std::string, int64_t> WorkerTable::memory() const {
  std::vector<pid_t> pgids;
  for (const auto& [name, w] : workers_) pgids.push_back(w.process->pid());
  auto rss = proc::process_group_rss(pgids);
  std::map<std::string, int64_t> out;
  for (const auto& [name, w] : workers_) out[name] = rss[w.process->pid()];
  return out;
}

}  // namespace troupe::agent
