// The standing backend of ClusterImpl: the driver connects to a head started with
// `troupe start --head` and to the agents of the hosts that joined it. When the head's connection
// is lost, the driver connects again (as the agents do) and books its placement groups again.
#include <condition_variable>
#include <future>
#include <optional>
#include <thread>

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
// How often a driver that lost its head tries again: the agents' reconnect interval
// (agent::AgentConfig::reconnect_interval).
constexpr std::chrono::milliseconds kHeadReconnectInterval{500};
// How long a driver back with a head waits for the hosts of its placement groups to register.
constexpr std::chrono::milliseconds kRestoreHostsWait{10000};
}  // namespace

class StandingBackend : public ClusterBackend {
 public:
  // `address`: the head's HOST:PORT, connected by start(); or `injected`, a head client to use
  // instead (nothing is connected, no head keeper runs).
  StandingBackend(ClusterImpl& cluster, std::string address, std::unique_ptr<HeadClient> injected)
      : c_(cluster), address_(std::move(address)), injected_(std::move(injected)) {}

  void start() override;
  void refresh_hosts() override;
  std::shared_ptr<AgentClient> reconnect_agent(size_t host) override;
  void describe_host(size_t host, HostInfo& info) const override {
    info.agent_pid = c_.host_records_[host].agent_pid;
    info.alive = c_.host_records_[host].alive;
  }
  void mark_lost(const std::vector<std::shared_ptr<WorkerState>>& lost,
                 const std::string& host_name, const std::string& address,
                 const Error& reason) override;
  std::string own_class_executable() const override {
    return env::self_executable();  // the agent's own binary is `troupe`
  }
  void stop(const std::vector<std::shared_ptr<WorkerState>>& workers) override;

 private:
  // Connects to the head at address_ (blocking; not on the I/O thread): heartbeats on, its events
  // to on_head_event, its close wakes keep_head. Throws the connection's Error.
  std::shared_ptr<transport::RpcPeer> connect_head();
  // The head keeper's thread: once the head's connection is lost, connects again every
  // kHeadReconnectInterval and books this driver's placement groups with the head again.
  void keep_head();
  // Reads the hosts and connects to the live ones' agents; throws kResourceUnavailable when none
  // is reachable.
  void attach_hosts();
  void on_head_event(wire::Event&& event);  // I/O thread

  ClusterImpl& c_;
  std::string address_;
  std::unique_ptr<HeadClient> injected_;  // moved to the cluster by start()
  RemoteHeadClient* remote_ = nullptr;    // the cluster's head_client_, when by address
  std::mutex mu_;                         // guards the members below
  std::condition_variable keeper_cv_;
  std::shared_ptr<transport::RpcPeer> peer_;  // the connection to the head
  bool head_lost_ = false, stopping_ = false;
  std::thread keeper_;
};

void StandingBackend::start() {
  c_.make_session_dir(false);
  for (unsigned char c : token::random_bytes(4))
    c_.id_prefix_ += "0123456789abcdef"[c >> 4], c_.id_prefix_ += "0123456789abcdef"[c & 15];
  c_.id_prefix_ += ".";  // other drivers share the head and the agents
  if (injected_) {
    address_ = c_.options_.address.empty() ? "(injected head)" : c_.options_.address;
    c_.head_client_ = std::move(injected_);
    attach_hosts();
    c_.make_store();
    return;
  }
  if (address_.find(':') == std::string::npos)
    throw Error(ErrorCode::kInvalidArgument,
                "the cluster address '" + address_ + "' is not HOST:PORT (TROUPE_ADDRESS)");
  c_.token_ = env::get_or(launch_env::kToken, "");
  if (auto file = env::get(launch_env::kTokenFile); c_.token_.empty() && file && !file->empty())
    c_.token_ = token::read_file(*file);
  if (c_.token_.empty())
    throw Error(ErrorCode::kUnauthenticated,
                "connecting to the cluster at " + address_ +
                    " needs its token: set TROUPE_TOKEN, or TROUPE_TOKEN_FILE to the token file "
                    "that `troupe start --head` printed");
  std::shared_ptr<transport::RpcPeer> peer;
  try {
    peer = connect_head();
  } catch (const Error& e) {
    throw Error(e.code(),
                "cannot connect to the cluster's head at " + address_ + ": " + e.message());
  }
  auto remote = std::make_unique<RemoteHeadClient>(peer, address_, kHeadRequestTimeout);
  remote_ = remote.get();
  c_.head_client_ = std::move(remote);
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer_ = peer;
  }
  keeper_ = std::thread([this] { keep_head(); });
  attach_hosts();
  c_.make_store();
}

std::shared_ptr<transport::RpcPeer> StandingBackend::connect_head() {
  std::promise<std::shared_ptr<transport::RpcPeer>> done;
  auto fut = done.get_future();
  transport::async_connect(
      c_.loop_->context(), "tcp:" + address_, c_.token_, kHeadConnectTimeout,
      [this, &done](std::shared_ptr<transport::Connection> c, const Error* error) {
        if (error) {
          done.set_exception(std::make_exception_ptr(*error));
          return;
        }
        transport::RpcPeer::Handlers h;
        h.on_event = [this](wire::Event&& e) { on_head_event(std::move(e)); };
        h.on_close = [this](const Error& reason) {
          {
            std::lock_guard<std::mutex> lock(c_.mu_);
            if (c_.shut_down_) return;
          }
          TROUPE_LOG(Warning) << "lost the head at " << address_ << " (" << reason.message()
                              << "): calls to live workers go on; new placements fail until it "
                                 "is back";
          std::lock_guard<std::mutex> lock(mu_);
          head_lost_ = true;
          keeper_cv_.notify_all();
        };
        done.set_value(transport::RpcPeer::attach(c, wire::FrameLimits{}, std::move(h)));
      });
  auto peer = fut.get();  // throws the connection's error
  peer->start_heartbeat(c_.options_.heartbeat_interval, c_.options_.host_lost_timeout);
  return peer;
}

void StandingBackend::keep_head() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    keeper_cv_.wait(lock, [this] { return stopping_ || head_lost_; });
    // The agents' back-off: a new try every reconnect interval.
    if (keeper_cv_.wait_for(lock, kHeadReconnectInterval, [this] { return stopping_; })) return;
    head_lost_ = false;  // a close from here on (of the new connection too) sets it again
    lock.unlock();
    std::shared_ptr<transport::RpcPeer> peer;
    try {
      peer = connect_head();
      size_t booked = remote_->reattach(peer, kRestoreHostsWait);
      TROUPE_LOG(Warning) << "connected to the head at " << address_ << " again: " << booked
                          << " placement group(s) of this driver booked again";
      // What this driver waited for is not listed by the new head: its waiters try again there.
      remote_->notify_freed();
    } catch (const Error& e) {
      TROUPE_LOG(Debug) << "the head at " << address_ << " is not back: " << e.message();
      if (peer) peer->close(e);
      lock.lock();
      head_lost_ = true;
      continue;
    }
    lock.lock();
    peer_ = peer;
  }
}

void StandingBackend::attach_hosts() {
  refresh_hosts();
  size_t alive = 0, connected = 0;
  std::vector<head::HostRecord> records;
  {
    std::lock_guard<std::mutex> lock(c_.hosts_mu_);
    records = c_.host_records_;
  }
  for (size_t i = 0; i < records.size(); ++i) {
    if (!records[i].alive) continue;
    ++alive;
    try {
      c_.agent(i);
      ++connected;
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << "cannot reach the agent of " << records[i].host_name << ": "
                          << e.message();
    }
  }
  if (connected == 0)
    throw Error(ErrorCode::kResourceUnavailable,
                "the cluster at " + address_ + " has " +
                    (alive == 0 ? std::string("no live host")
                                : std::to_string(alive) + " live host(s), none reachable") +
                    ": join hosts with `troupe start --address " + address_ + "`");
  TROUPE_LOG(Info) << "connected to the cluster at " << address_ << ": " << connected << " host(s)";
}

void StandingBackend::refresh_hosts() {
  auto records = c_.head_client_->hosts();
  const std::string mine = env::network_id();
  std::lock_guard<std::mutex> lock(c_.hosts_mu_);
  if (c_.agents_.size() < records.size()) c_.agents_.resize(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    c_.agents_[i].host_name = records[i].host_name;
    c_.agents_[i].same_network = records[i].network_id == mine;
  }
  c_.host_records_ = std::move(records);
}

std::shared_ptr<AgentClient> StandingBackend::reconnect_agent(size_t host) {
  refresh_hosts();
  head::HostRecord record;
  bool same_network = false;
  {
    std::lock_guard<std::mutex> lock(c_.hosts_mu_);
    if (host >= c_.host_records_.size())
      throw Error(ErrorCode::kInvalidArgument,
                  "host index " + std::to_string(host) + " is out of range: the cluster at " +
                      address_ + " has " + std::to_string(c_.host_records_.size()) + " hosts");
    record = c_.host_records_[host];
    same_network = c_.agents_[host].same_network;
  }
  if (!record.alive)
    throw Error(ErrorCode::kHostLost, "host " + record.host_name + " (id " + std::to_string(host) +
                                          ", " + record.address +
                                          ") is lost: its agent is not connected to the head");
  auto client =
      c_.open_agent(host, same_network ? record.unix_endpoint : record.tcp_endpoint, true);
  std::lock_guard<std::mutex> lock(c_.hosts_mu_);
  auto& link = c_.agents_[host];
  if (link.client && !link.client->closed()) {  // another thread connected meanwhile
    client->close(Error(ErrorCode::kShutdown, "a duplicate connection"));
    return link.client;
  }
  link.client = client;
  return client;
}

void StandingBackend::mark_lost(const std::vector<std::shared_ptr<WorkerState>>& lost,
                                const std::string& host_name, const std::string& address,
                                const Error& reason) {
  if (!lost.empty())
    TROUPE_LOG(Warning) << "host " << host_name << " (" << address << ") is lost ("
                        << reason.message() << "): " << lost.size() << " worker(s) lost with it";
  for (const auto& w : lost)
    w->mark_dead(Error(ErrorCode::kHostLost, w->describe() + " is lost with its host " + host_name +
                                                 " (" + address + "): " + reason.message()));
}

void StandingBackend::on_head_event(wire::Event&& event) {
  if (event.name == control::ResourcesFreed::kEvent) {
    if (c_.head_client_) c_.head_client_->notify_freed();
    return;
  }
  if (event.name != control::HostLost::kEvent) return;
  control::HostLost lost;
  try {
    lost = control::HostLost::from(event.value);
  } catch (const Error& e) {
    TROUPE_LOG(Warning) << "the head sent a bad event: " << e.message();
    return;
  }
  // The event names the host by the head's id; this driver's ids may differ (a restarted head
  // numbers hosts anew): the name decides.
  std::shared_ptr<AgentClient> client;
  std::optional<size_t> host;
  {
    std::lock_guard<std::mutex> lock(c_.hosts_mu_);
    for (size_t i = 0; i < c_.agents_.size() && !host; ++i)
      if (c_.agents_[i].host_name == lost.name) host = i;
    if (host) client = c_.agents_[*host].client;
  }
  // Runs on the I/O thread (the head's events), where last_heard() may be read. A host this
  // driver heard from within two heartbeat intervals is reachable from here: the head lost its
  // own link to it (a flap, or a partition between head and host), and its workers go on; this
  // driver's own heartbeat still ends the connection if the host goes silent.
  if (client && !client->closed() &&
      std::chrono::steady_clock::now() - client->last_heard() <
          2 * c_.options_.heartbeat_interval) {
    TROUPE_LOG(Info) << "the head lost host " << lost.name << " (" << lost.reason
                     << "), but this driver still hears from its agent: its workers go on";
    return;
  }
  {
    std::lock_guard<std::mutex> lock(c_.hosts_mu_);
    if (host && *host < c_.host_records_.size()) c_.host_records_[*host].alive = false;
  }
  // The head noticed first: the same as our own heartbeat running out.
  if (client) client->close(Error(ErrorCode::kHostLost, "the head lost it: " + lost.reason));
}

void StandingBackend::stop(const std::vector<std::shared_ptr<WorkerState>>& workers) {
  // Only this driver's workers stop; the head and the agents keep serving other drivers.
  ClusterImpl::stop_workers(workers, kStandingStopGrace);
  std::shared_ptr<transport::RpcPeer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    keeper_cv_.notify_all();
  }
  if (keeper_.joinable()) keeper_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer = peer_;
  }
  if (peer) peer->close(Error(ErrorCode::kShutdown, "the driver shut down"));
}

std::unique_ptr<ClusterBackend> make_standing_backend(ClusterImpl& cluster, std::string address) {
  return std::make_unique<StandingBackend>(cluster, std::move(address), nullptr);
}

std::unique_ptr<ClusterBackend> make_injected_backend(ClusterImpl& cluster,
                                                      std::unique_ptr<HeadClient> head) {
  return std::make_unique<StandingBackend>(cluster, "", std::move(head));
}

}  // namespace troupe::internal

namespace troupe {

ClusterOptions ClusterOptions::connect(std::string address) {
  ClusterOptions o;
  o.address = std::move(address);
  return o;
}

}  // namespace troupe
