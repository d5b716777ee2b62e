#include <fnmatch.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/process.h"
#include "common/timeline.h"
#include "controller/cluster_impl.h"
#include "controller/init.h"
#include "troupe/worker_class.h"
#include "wire/control.h"

namespace troupe {
namespace internal {

namespace control = wire::control;

namespace {

constexpr std::chrono::milliseconds kConnectTimeout{10000};
constexpr size_t kDeadKept = 32;

}  // namespace

uint32_t ClusterImpl::next_timeline_scope() {
  static std::atomic<uint32_t> next{1};
  return next.fetch_add(1);
}

namespace {
// ClusterOptions::python_preload and TROUPE_PYTHON_PRELOAD, each module once; throws
// Error(kInvalidArgument) for a name that is not a module name.
std::vector<std::string> checked_python_preload(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& name, const char* from) {
    if (!env::valid_module_name(name))
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(from) + ": '" + name + "' is not a Python module name (a.b.c)");
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  for (const auto& name : given) add(name, "python_preload");
  for (const auto& name : env::split_list(env::get_or(launch_env::kPythonPreload, ""), ','))
    add(name, launch_env::kPythonPreload);
  return out;
}
}  // namespace

ClusterImpl::ClusterImpl(ClusterOptions options)
    : options_(std::move(options)),
      python_preload_(checked_python_preload(options_.python_preload)),
      record_timeline_(options_.timeline && !timeline::off_in_environment()) {
  if (env::get(worker_env::kRole))
    throw Error(ErrorCode::kInternal,
                "this process was started by troupe as a " + *env::get(worker_env::kRole) +
                    ", but main() did not call troupe::init(argc, argv) first");
  process::raise_descriptor_limit();  // a connection per worker
  std::string address =
      options_.address.empty() ? env::get_or(launch_env::kAddress, "") : options_.address;
  if (address.empty() && options_.hosts.empty())
    throw Error(ErrorCode::kInvalidArgument, "a cluster needs at least one host");
  loop_ = std::make_unique<transport::IoLoop>();
  connect_ = make_agent_connector(*loop_);
  connect_worker_ = make_worker_connector(*loop_);
  backend_ = address.empty() ? make_embedded_backend(*this)
                             : make_standing_backend(*this, std::move(address));
  start_backend();
}

ClusterImpl::ClusterImpl(ClusterOptions options, std::unique_ptr<HeadClient> head,
                         AgentConnector connect, WorkerConnector connect_worker)
    : options_(std::move(options)),
      python_preload_(checked_python_preload(options_.python_preload)),
      record_timeline_(options_.timeline && !timeline::off_in_environment()) {
  loop_ = std::make_unique<transport::IoLoop>();
  connect_ = std::move(connect);
  connect_worker_ = connect_worker ? std::move(connect_worker) : make_worker_connector(*loop_);
  backend_ = make_injected_backend(*this, std::move(head));
  start_backend();
}

ClusterImpl::~ClusterImpl() { shutdown(); }

void ClusterImpl::start_backend() {
  try {
    backend_->start();
    start_metrics();
  } catch (...) {
    shutdown();
    throw;
  }
}

void ClusterImpl::start_metrics() {
  if (options_.metrics_port < 0) return;
  metrics_ = std::make_shared<DriverMetrics>([this] {
    std::lock_guard<std::mutex> lock(mu_);
    return workers_.size();
  });
  metrics_address_ = metrics_->serve(options_.metrics_address, options_.metrics_port, token_);
  TROUPE_LOG(Info) << "driver metrics at http://" << metrics_address_ << "/metrics";
}

head::Head& ClusterImpl::head() {
  head::Head* h = backend_->embedded_head();
  if (!h) throw Error(ErrorCode::kInvalidArgument, "a standing cluster has no head in the driver");
  return *h;
}

void ClusterImpl::make_session_dir(bool with_hosts) {
  std::vector<std::string> names;
  for (size_t i = 0; with_hosts && i < options_.hosts.size(); ++i) {
    if (options_.hosts[i].name.empty()) options_.hosts[i].name = "host-" + std::to_string(i);
    names.push_back(options_.hosts[i].name);
  }
  session_ = create_session(options_.session_dir, names);
  session_dir_ = session_.dir;
}

std::shared_ptr<AgentClient> ClusterImpl::open_agent(size_t host, const std::string& endpoint,
                                                     bool monitor) {
  AgentConnectOptions o;
  o.endpoint = endpoint;
  o.token = token_;
  o.connect_timeout = kConnectTimeout;
  if (monitor) {
    o.heartbeat_interval = options_.heartbeat_interval;
    o.heartbeat_timeout = options_.host_lost_timeout;
  }
  AgentEvents events;
  events.on_worker_exited = [this, host](control::WorkerExited&& e) {
    on_worker_exited(host, std::move(e));
  };
  events.on_worker_log = [this](control::WorkerLog&& log) { print_worker_log(std::move(log)); };
  events.on_closed = [this, host](const AgentClient* client, const Error& reason) {
    on_agent_lost(host, client, reason);
  };
  return connect_(host, o, std::move(events));
}

void ClusterImpl::on_agent_lost(size_t host, const AgentClient* client, const Error& reason) {
  std::vector<std::shared_ptr<WorkerState>> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    for (const auto& [name, w] : workers_) {
      if (w->host() != host) continue;
      auto agent = w->agent.lock();
      if (!agent || agent.get() == client) lost.push_back(w);
    }
  }
  std::string host_name, address;
  bool local = false;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    host_name = agents_.at(host).host_name;
    address = host_records_.at(host).address;
    local = host_records_.at(host).machine_id == env::machine_id();
  }
  // Workers die with their agent (parent-death signal); on this machine the driver also kills
  // their process groups, so that no child a worker forked survives. Only with proof that the
  // group is still the worker's: `lost` holds no worker known dead, and signal_group_if_ours
  // checks pid and start time. A worker already reaped by whoever adopted it (init) leaves a
  // group that is no longer provably ours: its members are left alone.
  for (const auto& w : lost)
    if (local && w->pid() > 0 && w->start_time() > 0)
      process::signal_group_if_ours(w->pid(), w->start_time(), SIGKILL);
  if (record_timeline_) {
    auto e = timeline::make(timeline::Kind::kInstant, "host", "host lost", timeline::now_ns(), 0,
                            host_name + " (" + address + "): " + reason.message());
    e.host = static_cast<int32_t>(host);
    e.scope = timeline_scope_;
    timeline::record(e);
  }
  backend_->mark_lost(lost, host_name, address, reason);
}

void ClusterImpl::on_worker_exited(size_t host, control::WorkerExited&& exited) {
  std::shared_ptr<WorkerState> w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(user_name(exited.name));
    if (it == workers_.end() || it->second->host() != host) return;
    w = it->second;
  }
  w->on_exit_report(exited.status, exited.stderr_tail);
}

Worker ClusterImpl::start_worker(WorkerOptions options) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) throw Error(ErrorCode::kShutdown, "the cluster is shut down");
  }
  std::shared_ptr<AgentClient> agent_client = agent(options.host);  // throws
  std::string host_name;
  bool same_network = true;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    host_name = agents_[options.host].host_name;
    same_network = agents_[options.host].same_network;
  }
  bool mapped = has_executable(options.class_name);
  if (!mapped && !find_worker_class(options.class_name)) {
    std::string known;
    for (const auto& n : registered_worker_class_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::kUnknownClass,
                "cannot start worker '" +
                    (options.name.empty() ? options.class_name : options.name) + "': class '" +
                    options.class_name + "' is not registered in this binary (registered: " +
                    (known.empty() ? "none" : known) + ") and has no executable in ClusterOptions");
  }
  std::shared_ptr<WorkerState> worker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) throw Error(ErrorCode::kShutdown, "the cluster is shut down");
    if (options.name.empty())
      options.name =
          options.class_name + "-" + std::to_string(name_counters_[options.class_name]++);
    if (auto it = workers_.find(options.name); it != workers_.end() && it->second->alive())
      throw Error(ErrorCode::kInvalidArgument, "a worker named '" + options.name + "' exists");
    worker = std::make_shared<WorkerState>(loop_->context(), options.name, options.class_name,
                                           options.host, host_name);
    worker->agent = agent_client;
    worker->agent_name = id_prefix_ + options.name;
    if (store_ && (same_network ? store_->enabled() : store_->remote_enabled())) {
      worker->store = store_;
      worker->store_target = same_network ? DriverStore::kLocal : options.host;
    }
    worker->group = options.group;
    worker->rank = options.rank;
    worker->outlives_driver = options.detached && !backend_->embedded_head();
    worker->metrics = metrics_;
    worker->record_timeline = record_timeline_;
    worker->timeline_scope = timeline_scope_;
    std::weak_ptr<WorkerState> weak = worker;
    worker->on_dead = [this, weak] {
      if (auto w = weak.lock()) forget(w);
    };
    workers_[options.name] = worker;
  }
  launch(worker, options, agent_client, same_network);
  return Access::worker(worker);
}

std::map<std::string, std::string> ClusterImpl::inheritable_environment() {
  auto vars = env::current();
  for (auto it = vars.begin(); it != vars.end();)
    it = it->first.rfind(launch_env::kPrefix, 0) == 0 || env::is_launcher_variable(it->first)
             ? vars.erase(it)
             : std::next(it);
  return vars;
}

std::shared_ptr<AgentClient> ClusterImpl::connected_agent(size_t host) const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  if (host < agents_.size() && agents_[host].client && !agents_[host].client->closed())
    return agents_[host].client;
  return nullptr;
}

std::shared_ptr<AgentClient> ClusterImpl::agent(size_t host) {
  if (auto client = connected_agent(host)) return client;
  return backend_->reconnect_agent(host);
}

void ClusterImpl::launch(const std::shared_ptr<WorkerState>& worker, const WorkerOptions& options,
                         std::shared_ptr<AgentClient> agent, bool same_network) {
  std::map<std::string, std::string> vars;
  if (options.inherit_driver_environment) vars = inheritable_environment();
  for (const auto& [k, v] : options.env) vars[k] = v;
  std::vector<std::string> wrapper = options.launch_wrapper;
  if (wrapper.empty())
    for (const auto& rule : options_.launch_wrappers)
      if (::fnmatch(rule.pattern.c_str(), options.name.c_str(), 0) == 0) {
        wrapper = rule.command;
        TROUPE_LOG(Info) << "worker " << options.name << " starts under launch wrapper '"
                         << rule.pattern << "'";
        break;
      }
  control::StartWorker request;
  request.name = worker->agent_name;
  request.gpus = options.gpus;
  request.num_gpus = options.num_gpus;
  request.wrapper = wrapper;
  request.take_ports = options.ports;
  request.log_to_terminal = options.log_to_driver;
  request.start_timeout_ms = options.start_timeout.count();
  request.detached = worker->outlives_driver;
  if (auto exe = executable_for(options.class_name)) {
    request.executable = exe->path;
    request.args = exe->args;
    for (const auto& [k, v] : exe->env) vars.emplace(k, v);
    request.python_fork = exe->python;
    if (exe->python) request.python_preload = python_preload_;
  } else {
    // Empty on an embedded cluster (its agents run this binary); on a standing one this binary,
    // which serves the fork-server role when troupe::init ran (a C++ driver).
    request.executable = backend_->own_class_executable();
    request.fork_server = !request.executable.empty() && internal::initialised();
  }
  request.env = std::move(vars);
  if (options.shared_env && !options.shared_env->vars.empty()) {
    request.shared_env_id = options.shared_env->id;
    request.shared_env = options.shared_env->vars;  // sent to the agent only once
  }
  std::string log_path = session_dir_ + "/logs/" + options.name + ".log";
  Kwargs ctor_args = options.args;
  std::string token = token_;
  const int64_t spawn_start = timeline::now_ns();  // start phases on the worker's track
  agent->start_worker(request, "start of worker '" + options.name + "'")
      .then([worker, ctor_args, token, log_path, same_network, connect = connect_worker_,
             spawn_start](const Error* e, control::StartWorkerReply started) {
        if (e) {
          worker->mark_dead(
              Error(e->code(), "cannot start " + worker->describe() + ": " + e->message()));
          return;
        }
        worker->on_started(static_cast<pid_t>(started.pid),
                           static_cast<uint64_t>(started.start_time), started.gpus,
                           started.log_path.empty() ? log_path : started.log_path,
                           started.tcp_endpoint);
        worker->record_span("phase", "spawn", spawn_start);
        const int64_t connect_start = timeline::now_ns();
        // Unix sockets on this host; TCP to workers on other hosts.
        std::string endpoint = same_network ? started.unix_endpoint : started.tcp_endpoint;
        if (endpoint.empty()) {
          worker->mark_dead(worker->death_error("it has no TCP endpoint to reach it from here"));
          return;
        }
        connect(endpoint, token, kConnectTimeout,
                [worker, ctor_args, connect_start](std::shared_ptr<WorkerClient> client,
                                                   const Error* error) {
                  if (error) {
                    worker->mark_dead(worker->death_error("cannot connect: " + error->message()));
                    return;
                  }
                  worker->record_span("phase", "connect", connect_start);
                  worker->on_connected(std::move(client), ctor_args);
                });
      });
}

std::vector<std::string> ClusterImpl::stop_workers(
    const std::vector<std::shared_ptr<WorkerState>>& workers, std::chrono::milliseconds grace) {
  using StopReply = AgentReply<control::StopWorkerReply>;
  std::vector<StopReply> stops;
  for (const auto& w : workers) {
    // A worker whose exit was reported needs no agent (which keeps only its last exits).
    if (std::string ended = w->exit_status(); !ended.empty()) {
      stops.emplace_back(make_ready_future(control::StopWorkerReply{ended}.to_value()),
                         &control::StopWorkerReply::from);
      continue;
    }
    auto agent = w->agent.lock();
    stops.push_back(
        agent ? agent->stop_worker(control::StopWorker{w->agent_name, grace.count()})
              : StopReply(make_failed_future(Error(ErrorCode::kConnectionLost, "no agent")),
                          &control::StopWorkerReply::from));
  }
  std::vector<std::string> out;
  auto deadline = Clock::now() + grace + std::chrono::seconds(5);
  for (size_t i = 0; i < workers.size(); ++i) {
    std::string status = "unknown (its agent did not answer)";
    if (stops[i].wait_until(deadline)) {
      try {
        status = stops[i].get(std::chrono::milliseconds(0)).status;
      } catch (const Error& e) {
        status = "unknown (" + e.message() + ")";
      }
    }
    workers[i]->mark_dead(Error(ErrorCode::kWorkerDied, workers[i]->describe() + " was stopped"));
    out.push_back(status);
  }
  return out;
}

void ClusterImpl::forget(const std::shared_ptr<WorkerState>& w) {
  Value entry = Map{{"name", w->name()},      {"group", w->group},
                    {"rank", w->rank},        {"class", w->class_name()},
                    {"host", w->host_name()}, {"pid", static_cast<int64_t>(w->pid())},
                    {"alive", false}};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(w->name());
  if (it == workers_.end() || it->second != w) return;
  workers_.erase(it);
  dead_.push_back(std::move(entry));
  if (dead_.size() > kDeadKept) dead_.pop_front();
}

void ClusterImpl::register_group(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  groups_.insert(name);
}

void ClusterImpl::forget_group(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  groups_.erase(name);
}

void ClusterImpl::print_worker_log(control::WorkerLog&& log) {
  pid_t pid = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = workers_.find(user_name(log.name)); it != workers_.end()) pid = it->second->pid();
  }
  std::string text;
  for (const auto& line : log.lines)
    text += "(" + user_name(log.name) + " pid=" + std::to_string(pid) + ") " + line + "\n";
  ssize_t unused = ::write(log.is_stderr ? STDERR_FILENO : STDOUT_FILENO, text.data(), text.size());
  (void)unused;
}

void ClusterImpl::shutdown() {
  std::lock_guard<std::mutex> serial(shutdown_mu_);
  std::vector<std::shared_ptr<WorkerState>> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (const auto& [name, w] : workers_) workers.push_back(w);
  }
  // Detached and attached workers keep running: their connections close, nothing stops them.
  std::vector<std::shared_ptr<WorkerState>> kept;
  std::erase_if(workers, [&kept](const std::shared_ptr<WorkerState>& w) {
    if (w->outlives_driver) kept.push_back(w);
    return w->outlives_driver;
  });
  for (auto& w : kept)
    w->mark_dead(Error(ErrorCode::kShutdown, w->describe() + ": this driver shut down (the "
                                                             "worker keeps running)"));
  if (!backend_) return;  // the constructor threw before choosing one
  if (metrics_) metrics_->stop();
  if (store_) store_->shutdown();
  // Calls fail with kShutdown from here on, whatever the workers' exits look like.
  for (auto& w : workers)
    w->mark_dead(Error(ErrorCode::kShutdown, w->describe() + " was shut down with the cluster"));
  backend_->stop(workers);
  std::vector<std::shared_ptr<AgentClient>> clients;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    for (const auto& a : agents_)
      if (a.client) clients.push_back(a.client);
  }
  for (auto& c : clients) c->close(Error(ErrorCode::kShutdown, "the cluster shut down"));
  // The closes above are posted to the loop: let them run before it stops, so that no
  // connection outlives it.
  loop_->run_sync([] {});
  loop_->stop();
  backend_->stopped();
  if (!session_.dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(session_.socket_dir, ec);
  }
}

}  // namespace internal

ClusterOptions ClusterOptions::local(size_t num_hosts, int gpus_per_host, double cpus_per_host) {
  ClusterOptions o;
  o.hosts.assign(num_hosts, HostSpec{});
  for (auto& h : o.hosts) {
    h.num_gpus = gpus_per_host;
    h.num_cpus = cpus_per_host;
  }
  return o;
}

Cluster::Cluster(ClusterOptions options)
    : impl_(std::make_unique<internal::ClusterImpl>(std::move(options))) {}
std::unique_ptr<Cluster> internal::Access::make_cluster(std::unique_ptr<ClusterImpl> impl) {
  return std::unique_ptr<Cluster>(new Cluster(std::move(impl)));
}

Cluster::Cluster(std::unique_ptr<internal::ClusterImpl> impl) : impl_(std::move(impl)) {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "Cluster: the implementation is null");
}
Cluster::~Cluster() { impl_->shutdown(); }
std::shared_ptr<const SharedEnv> make_shared_env(std::map<std::string, std::string> vars) {
  static std::atomic<uint64_t> next{0};
  auto env = std::make_shared<SharedEnv>();
  env->id = "env-" + std::to_string(next.fetch_add(1) + 1);
  env->vars = std::move(vars);
  return env;
}

Worker Cluster::start_worker(WorkerOptions options) {
  return impl_->start_worker(std::move(options));
}
std::vector<HostInfo> Cluster::hosts() const { return impl_->hosts(); }
std::vector<HostMemory> Cluster::host_memory(std::chrono::milliseconds timeout) const {
  return impl_->host_memory(timeout);
}
const std::string& Cluster::session_dir() const { return impl_->session_dir(); }
std::string Cluster::metrics_address() const { return impl_->metrics_address(); }
void Cluster::shutdown() { impl_->shutdown(); }

}  // namespace troupe
