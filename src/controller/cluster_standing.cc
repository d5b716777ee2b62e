// ClusterImpl on a standing cluster: the driver connects to a head started with
// `troupe start --head` and to the agents of the hosts that joined it.
#include <unistd.h>

#include <filesystem>
#include <future>

#include "common/env.h"
#include "common/launch_env.h"
#include "common/log.h"
#include "common/token.h"
#include "controller/cluster_impl.h"
#include "wire/head_protocol.h"

namespace troupe::internal {

namespace control = wire::control;

namespace {
constexpr std::chrono::milliseconds kHeadConnectTimeout{10000};
constexpr std::chrono::milliseconds kHeadRequestTimeout{30000};
constexpr std::chrono::milliseconds kStandingStopGrace{3000};
}  // namespace

void ClusterImpl::connect_standing(const std::string& address) {
  head_address_ = address;
  id_prefix_.clear();
  for (unsigned char c : token::random_bytes(4))
    id_prefix_ += "0123456789abcdef"[c >> 4], id_prefix_ += "0123456789abcdef"[c & 15];
  id_prefix_ += ".";  // other drivers share the head and the agents
  if (address.find(':') == std::string::npos)
    throw Error(ErrorCode::kInvalidArgument,
                "the cluster address '" + address + "' is not HOST:PORT (TROUPE_ADDRESS)");
  token_ = env::get_or(launch_env::kToken, "");
  if (auto file = env::get(launch_env::kTokenFile); token_.empty() && file && !file->empty())
    token_ = token::read_file(*file);
  if (token_.empty())
    throw Error(ErrorCode::kUnauthenticated,
                "connecting to the cluster at " + address +
                    " needs its token: set TROUPE_TOKEN, or TROUPE_TOKEN_FILE to the token file "
                    "that `troupe start --head` printed");
  std::promise<std::shared_ptr<transport::RpcPeer>> done;
  auto fut = done.get_future();
  transport::async_connect(
      loop_->context(), "tcp:" + address, token_, kHeadConnectTimeout,
      [this, &done](std::shared_ptr<transport::Connection> c, const Error* error) {
        if (error) {
          done.set_exception(std::make_exception_ptr(*error));
          return;
        }
        transport::RpcPeer::Handlers h;
        h.on_event = [this](wire::Event&& e) { on_head_event(std::move(e)); };
        h.on_close = [this](const Error& reason) {
          std::lock_guard<std::mutex> lock(mu_);
          if (shut_down_) return;
          TROUPE_LOG(Warning) << "lost the head at " << head_address_ << " (" << reason.message()
                              << "): calls to live workers go on; new placements fail";
        };
        done.set_value(transport::RpcPeer::attach(c, wire::FrameLimits{}, std::move(h)));
      });
  try {
    head_peer_ = fut.get();
  } catch (const Error& e) {
    throw Error(e.code(),
                "cannot connect to the cluster's head at " + address + ": " + e.message());
  }
  head_peer_->start_heartbeat(options_.heartbeat_interval, options_.host_lost_timeout);
  head_client_ = make_remote_head_client(head_peer_, address, kHeadRequestTimeout);
  attach_hosts();
  make_store();
}

void ClusterImpl::attach_hosts() {
  const std::string& address = head_address_;
  refresh_hosts();
  size_t alive = 0, connected = 0;
  std::vector<head::HostRecord> records;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    records = host_records_;
  }
  for (size_t i = 0; i < records.size(); ++i) {
    if (!records[i].alive) continue;
    ++alive;
    try {
      agent(i);
      ++connected;
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << "cannot reach the agent of " << records[i].host_name << ": "
                          << e.message();
    }
  }
  if (connected == 0)
    throw Error(ErrorCode::kResourceUnavailable,
                "the cluster at " + address + " has " +
                    (alive == 0 ? std::string("no live host")
                                : std::to_string(alive) + " live host(s), none reachable") +
                    ": join hosts with `troupe start --address " + address + "`");
  TROUPE_LOG(Info) << "connected to the cluster at " << address << ": " << connected << " host(s)";
}

void ClusterImpl::refresh_hosts() const {
  auto records = head_client_->hosts();
  const std::string mine = env::network_id();
  std::lock_guard<std::mutex> lock(hosts_mu_);
  if (agents_.size() < records.size()) agents_.resize(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    agents_[i].host_name = records[i].host_name;
    agents_[i].same_network = records[i].network_id == mine;
  }
  host_records_ = std::move(records);
}

void ClusterImpl::on_head_event(wire::Event&& event) {
  if (event.name != control::HostLost::kEvent) return;
  control::HostLost lost;
  try {
    lost = control::HostLost::from(event.value);
  } catch (const Error& e) {
    TROUPE_LOG(Warning) << "the head sent a bad event: " << e.message();
    return;
  }
  std::shared_ptr<AgentClient> client;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    if (lost.index >= 0 && static_cast<size_t>(lost.index) < agents_.size())
      client = agents_[lost.index].client;
  }
  // Runs on the I/O thread (the head's events), where last_heard() may be read. A host this
  // driver heard from within two heartbeat intervals is reachable from here: the head lost its
  // own link to it (a flap, or a partition between head and host), and its workers go on; this
  // driver's own heartbeat still ends the connection if the host goes silent.
  if (client && !client->closed() &&
      std::chrono::steady_clock::now() - client->last_heard() < 2 * options_.heartbeat_interval) {
    TROUPE_LOG(Info) << "the head lost host " << lost.name << " (" << lost.reason
                     << "), but this driver still hears from its agent: its workers go on";
    return;
  }
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    if (lost.index >= 0 && static_cast<size_t>(lost.index) < host_records_.size())
      host_records_[lost.index].alive = false;
  }
  // The head noticed first: the same as our own heartbeat running out.
  if (client) client->close(Error(ErrorCode::kHostLost, "the head lost it: " + lost.reason));
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

void ClusterImpl::shutdown_standing() {
  std::vector<std::shared_ptr<WorkerState>> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (const auto& [name, w] : workers_) workers.push_back(w);
  }
  if (!loop_) return;
  for (auto& w : workers)
    w->mark_dead(Error(ErrorCode::kShutdown, w->describe() + " was shut down with the cluster"));
  if (store_) store_->shutdown();
  // Only this driver's workers stop; the head and the agents keep serving other drivers.
  stop_workers(workers, kStandingStopGrace);
  std::vector<std::shared_ptr<AgentClient>> clients;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    for (const auto& a : agents_)
      if (a.client) clients.push_back(a.client);
  }
  for (auto& c : clients) c->close(Error(ErrorCode::kShutdown, "the driver shut down"));
  if (head_peer_) head_peer_->close(Error(ErrorCode::kShutdown, "the driver shut down"));
  loop_->run_sync([] {});
  loop_->stop();
  if (!session_.dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(session_.socket_dir, ec);
  }
}

}  // namespace troupe::internal

namespace troupe {

ClusterOptions ClusterOptions::connect(std::string address) {
  ClusterOptions o;
  o.address = std::move(address);
  return o;
}

}  // namespace troupe
