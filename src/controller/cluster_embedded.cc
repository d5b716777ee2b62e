// The embedded backend of ClusterImpl: a head in this process and one agent process per HostSpec,
// children of the driver, reached over Unix sockets.
#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "agent/agent.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/process.h"
#include "common/token.h"
#include "controller/cluster_impl.h"

namespace troupe::internal {

namespace {

constexpr std::chrono::milliseconds kStopGrace{3000};

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (int i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

}  // namespace

class EmbeddedBackend : public ClusterBackend {
 public:
  explicit EmbeddedBackend(ClusterImpl& cluster) : c_(cluster) {}

  void start() override {
    c_.make_session_dir(true);
    c_.token_ = env::get_or(launch_env::kToken, "");
    if (c_.token_.empty()) {
      c_.token_ = token::generate();
      write_token_file(c_.session_, c_.token_);
    }
    head_ = std::make_shared<head::Head>(
        c_.loop_->context(), "unix:" + c_.session_.socket_dir + "/head.sock", c_.token_);
    c_.head_client_ = make_embedded_head_client(head_);
    start_agents();
    connect_agents();
    c_.make_store();
    head_->set_status_provider([this] {
      Value status = c_.status();
      if (status.is_map())
        for (auto& section : head_->placement_status()) status.as_map().push_back(section);
      return status;
    });
  }

  void refresh_hosts() override {}  // the hosts are the ClusterOptions'

  std::shared_ptr<AgentClient> reconnect_agent(size_t host) override {
    std::lock_guard<std::mutex> lock(c_.hosts_mu_);
    if (host >= c_.agents_.size())
      throw Error(ErrorCode::kInvalidArgument, "host index " + std::to_string(host) +
                                                   " is out of range: the cluster has " +
                                                   std::to_string(c_.agents_.size()) + " hosts");
    return c_.agents_[host].client;  // closed: requests on it fail naming the agent
  }

  void describe_host(size_t host, HostInfo& info) const override {
    info.agent_pid = pids_.at(host);
    const auto& client = c_.agents_[host].client;
    info.alive = client && !client->closed();
  }

  void mark_lost(const std::vector<std::shared_ptr<WorkerState>>& lost,
                 const std::string& host_name, const std::string&, const Error& reason) override {
    for (const auto& w : lost)
      w->mark_dead(
          w->death_error("its agent on " + host_name + " is gone (" + reason.message() + ")"));
  }

  std::string own_class_executable() const override { return {}; }

  // Asks every agent to stop its workers (SIGTERM, then SIGKILL) and exit; closes the head.
  void stop(const std::vector<std::shared_ptr<WorkerState>>&) override {
    if (!head_) return;  // start() failed before the head
    head_->expect_hosts_to_leave();
    std::vector<Future<Value>> stops;
    for (auto& a : c_.agents_)
      if (a.client) stops.push_back(a.client->shutdown().raw());
    wait_all(stops, kStopGrace + std::chrono::seconds(2));
    head_->close();  // agents that did not answer see the head go and stop as well
    wait_agents_exit(kStopGrace + std::chrono::seconds(3));
  }

  void stopped() override {
    head_.reset();
    if (!c_.session_.dir.empty()) remove_token_file(c_.session_);
  }

  head::Head* embedded_head() override { return head_.get(); }

 private:
  void start_agents();
  void connect_agents();
  // Spawns the agent of host `spec` (on the I/O thread: its parent-death signal is tied to a
  // thread that lives as long as the cluster); returns its pid.
  pid_t spawn_agent(const HostSpec& spec);
  void wait_agents_exit(std::chrono::milliseconds timeout);

  ClusterImpl& c_;
  std::shared_ptr<head::Head> head_;  // shared with head_client_, which may outlive shutdown
  std::vector<pid_t> pids_;           // by host id: the agents, our children until reaped (0)
};

void EmbeddedBackend::start_agents() {
  const double cores = static_cast<double>(std::thread::hardware_concurrency());
  std::vector<std::string> names;
  for (size_t i = 0; i < c_.options_.hosts.size(); ++i) {
    HostSpec& spec = c_.options_.hosts[i];
    if (spec.name.empty()) spec.name = "host-" + std::to_string(i);
    if (spec.address.empty()) spec.address = "127.0.0." + std::to_string(i + 2);
    if (spec.num_cpus <= 0) spec.num_cpus = cores;
    names.push_back(spec.name);
  }
  head_->expect_hosts(names);  // host i of ClusterOptions is head host i, however agents race
  for (const HostSpec& spec : c_.options_.hosts) {
    pids_.push_back(spawn_agent(spec));
    c_.agents_.push_back(ClusterImpl::AgentProcess{spec.name, nullptr});
  }
  auto deadline = Clock::now() + c_.options_.start_timeout;
  head_->wait_for_hosts(pids_.size(), deadline, [this]() -> std::string {
    for (size_t i = 0; i < pids_.size(); ++i) {
      int status = 0;
      if (::waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
        auto s = process::decode_wait_status(status);
        return "the agent of " + c_.agents_[i].host_name + " (pid " + std::to_string(pids_[i]) +
               ") exited during start-up: " + s.describe() + " (see its messages above)";
      }
    }
    return {};
  });
  // The head assigned the ids (expect_hosts kept ClusterOptions order): host i is head host i.
  c_.host_records_ = c_.head_client_->hosts();
  c_.host_records_.resize(c_.agents_.size());
  for (size_t i = 0; i < c_.agents_.size(); ++i)
    if (c_.host_records_[i].host_name != c_.agents_[i].host_name)
      throw Error(ErrorCode::kProtocol, "the head gave id " + std::to_string(i) + " to " +
                                            c_.host_records_[i].host_name + ", expected " +
                                            c_.agents_[i].host_name);
}

pid_t EmbeddedBackend::spawn_agent(const HostSpec& spec) {
  const ClusterOptions& options = c_.options_;
  std::vector<int> gpu_ids;
  for (int g = 0; g < spec.num_gpus; ++g) gpu_ids.push_back(g);
  auto vars = env::current();
  vars[worker_env::kRole] = "agent";
  vars[agent_env::kHostName] = spec.name;
  vars[agent_env::kAddress] = spec.address;
  vars[agent_env::kNumCpus] = std::to_string(spec.num_cpus);
  vars[agent_env::kGpuIds] = join_ints(gpu_ids);
  std::string labels;
  for (const auto& [k, v] : spec.labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
  vars[agent_env::kLabels] = labels;
  vars[agent_env::kHead] = head_->endpoint();
  vars[agent_env::kSessionDir] = c_.session_dir_;
  vars[agent_env::kSocketDir] = c_.session_.socket_dir;
  vars[agent_env::kLogToTerminal] = options.log_to_driver ? "1" : "0";
  if (options.object_store_memory > 0)
    vars[agent_env::kObjectStoreMemory] = std::to_string(options.object_store_memory);
  vars.erase(launch_env::kToken);
  if (env::get(launch_env::kToken))
    vars[launch_env::kToken] = c_.token_;  // the user chose to pass it this way
  else
    vars[launch_env::kTokenFile] = c_.session_dir_ + "/token";
  for (const auto& [k, v] : options.agent_executable.env) vars[k] = v;
  process::SpawnOptions opts;
  opts.executable = options.agent_executable.path.empty() ? env::self_executable()
                                                          : options.agent_executable.path;
  opts.args = options.agent_executable.args;
  opts.env = env::to_strings(vars);
  opts.new_process_group = true;
  opts.parent_death_signal = SIGTERM;
  pid_t pid = 0;
  c_.loop_->run_sync([&] { pid = process::spawn(opts); });
  return pid;
}

void EmbeddedBackend::connect_agents() {
  for (size_t i = 0; i < c_.agents_.size(); ++i) {
    auto client = c_.open_agent(i, c_.host_records_[i].unix_endpoint, false);
    std::lock_guard<std::mutex> lock(c_.hosts_mu_);
    c_.agents_[i].client = client;
  }
}

void EmbeddedBackend::wait_agents_exit(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (size_t i = 0; i < pids_.size(); ++i) {
    pid_t& pid = pids_[i];
    if (pid <= 0) continue;
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid || r < 0) break;
      if (Clock::now() >= deadline) {
        TROUPE_LOG(Warning) << "agent of " << c_.agents_[i].host_name
                            << " did not exit in time; killing it";
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid = 0;
  }
}

std::unique_ptr<ClusterBackend> make_embedded_backend(ClusterImpl& cluster) {
  return std::make_unique<EmbeddedBackend>(cluster);
}

}  // namespace troupe::internal
