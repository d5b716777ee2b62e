#include "controller/head_client.h"

#include <algorithm>
#include <thread>

#include "common/log.h"
#include "wire/head_protocol.h"

namespace troupe::internal {
namespace {

namespace control = wire::control;

class EmbeddedHeadClient : public HeadClient {
 public:
  explicit EmbeddedHeadClient(std::shared_ptr<head::Head> head)
      : owned_(std::move(head)), head_(*owned_) {
    head_.set_on_resources_freed([this, alive = std::weak_ptr<int>(alive_)] {
      if (alive.lock()) notify_freed();
    });
  }
  std::vector<head::HostRecord> hosts() override { return head_.hosts(); }
  ~EmbeddedHeadClient() override { head_.set_on_resources_freed(nullptr); }
  using HeadClient::reserve;
  std::vector<head::BundlePlacement> reserve(const std::string& group_id,
                                             const std::vector<head::BundleRequest>& bundles,
                                             head::Strategy strategy,
                                             std::optional<size_t> only_host,
                                             const std::string& pending_as) override {
    return head_.reserve(group_id, bundles, strategy, only_host, pending_as);
  }
  void book_at(const std::string& group_id, const std::vector<head::BundleRequest>& bundles,
               const std::vector<head::BundlePlacement>& placements, bool overcommit) override {
    head_.restore(group_id, bundles, placements, overcommit);
  }
  std::vector<control::HostResources> resources() override { return head_.resources(); }
  void tie_booking(const std::string& group_id, size_t host, const std::string& worker) override {
    head_.tie(nullptr, group_id, host, worker);
  }
  bool release(const std::string& group_id) override { return head_.release(group_id); }
  std::vector<std::string> describe_free() override { return head_.describe_free(); }

 private:
  std::shared_ptr<head::Head> owned_;
  head::Head& head_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // the head's callback's check
};

head::HostRecord to_record(const control::HostEntry& e) {
  head::HostRecord r;
  r.host_name = e.host.host_name;
  r.address = e.host.address;
  r.num_cpus = e.host.num_cpus;
  r.gpu_ids = e.host.gpu_ids;
  r.labels = e.host.labels;
  r.unix_endpoint = e.host.unix_endpoint;
  r.tcp_endpoint = e.host.tcp_endpoint;
  r.agent_pid = static_cast<pid_t>(e.host.pid);
  r.machine_id = e.host.machine_id;
  r.network_id = e.host.network_id;
  r.memory_bytes = e.host.memory_bytes;
  r.alive = e.alive;
  r.registered = e.registered;
  return r;
}

}  // namespace

void HeadClient::release_unawaited(const std::string& group_id) {
  try {
    release(group_id);
  } catch (const Error& e) {
    TROUPE_LOG(Warning) << "cannot release placement group " << group_id << ": " << e.message();
  }
}

Value HeadClient::ask_names(const char* method, const Map&) {
  throw Error(ErrorCode::kInvalidArgument,
              std::string(method) +
                  ": named workers shared between drivers need a standing cluster (troupe start "
                  "--head); this cluster is embedded in its driver");
}

uint64_t HeadClient::add_freed_listener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  freed_listeners_.emplace(next_listener_, std::move(listener));
  return next_listener_++;
}

void HeadClient::remove_freed_listener(uint64_t id) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  freed_listeners_.erase(id);
}

void HeadClient::notify_freed() {
  std::vector<std::function<void()>> listeners;
  {
    std::lock_guard<std::mutex> lock(listeners_mu_);
    for (const auto& [id, l] : freed_listeners_) listeners.push_back(l);
  }
  for (const auto& l : listeners) l();
}

std::unique_ptr<HeadClient> make_embedded_head_client(std::shared_ptr<head::Head> head) {
  return std::make_unique<EmbeddedHeadClient>(std::move(head));
}

RemoteHeadClient::RemoteHeadClient(std::shared_ptr<transport::RpcPeer> peer, std::string address,
                                   std::chrono::milliseconds timeout)
    : peer_(std::move(peer)), address_(std::move(address)), timeout_(timeout) {}

std::vector<head::HostRecord> RemoteHeadClient::hosts() {
  std::shared_ptr<transport::RpcPeer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer = peer_;
  }
  return list(peer);
}

std::vector<head::HostRecord> RemoteHeadClient::list(
    const std::shared_ptr<transport::RpcPeer>& peer) {
  auto entries = control::ListHosts::reply_from(ask_on(peer, control::ListHosts::kMethod, {}));
  std::lock_guard<std::mutex> lock(mu_);
  head_ids_.clear();
  std::vector<char> listed;
  for (const auto& e : entries) {
    head::HostRecord r = to_record(e);
    size_t id = driver_id_locked(r.host_name);
    head_ids_[r.host_name] = static_cast<size_t>(e.index);
    known_[id] = std::move(r);
    listed.resize(known_.size());
    listed[id] = 1;
  }
  listed.resize(known_.size());
  for (size_t i = 0; i < known_.size(); ++i)
    if (!listed[i]) known_[i].alive = false;  // the head (a new one) does not know it
  return known_;
}

size_t RemoteHeadClient::driver_id_locked(const std::string& name) {
  for (size_t i = 0; i < known_.size(); ++i)
    if (known_[i].host_name == name) return i;
  head::HostRecord r;
  r.host_name = name;
  known_.push_back(std::move(r));
  return known_.size() - 1;
}

size_t RemoteHeadClient::head_id(size_t host) {
  for (bool listed = false;; listed = true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (host < known_.size())
        if (auto it = head_ids_.find(known_[host].host_name); it != head_ids_.end())
          return it->second;
      if (listed && host >= known_.size())
        throw Error(ErrorCode::kInvalidArgument,
                    "host index " + std::to_string(host) + " is out of range: the cluster at " +
                        address_ + " has " + std::to_string(known_.size()) + " hosts");
      if (listed)
        throw Error(
            ErrorCode::kResourceUnavailable,
            "host " + known_[host].host_name + " is not registered with the head at " + address_);
    }
    hosts();
  }
}

std::vector<head::BundlePlacement> RemoteHeadClient::reserve(
    const std::string& group_id, const std::vector<head::BundleRequest>& bundles,
    head::Strategy strategy, std::optional<size_t> only_host, const std::string& pending_as) {
  control::Reserve m;
  m.group_id = group_id;
  for (const auto& b : bundles)
    m.bundles.push_back(control::BundleSpec{b.cpus, b.gpus, b.memory_bytes, b.labels, b.resources});
  m.strategy = head::strategy_name(strategy);
  m.only_host = only_host ? static_cast<int64_t>(head_id(*only_host)) : -1;
  m.pending_as = pending_as;
  auto reply = control::ReserveReply::from(ask(control::Reserve::kMethod, m.to_map()));
  Held held{bundles, {}, {}};
  for (bool listed = false; held.placements.size() < reply.bundles.size(); listed = true) {
    if (listed) hosts();  // a host the head placed on joined since the last list
    std::lock_guard<std::mutex> lock(mu_);
    held.hosts.clear();
    held.placements.clear();
    for (const auto& p : reply.bundles) {
      auto it = std::find_if(head_ids_.begin(), head_ids_.end(), [&](const auto& e) {
        return e.second == static_cast<size_t>(p.host);
      });
      if (it == head_ids_.end()) {
        if (listed)
          throw Error(ErrorCode::kProtocol,
                      "the head at " + address_ + " placed a bundle on host " +
                          std::to_string(p.host) + ", which it does not list");
        break;
      }
      held.hosts.push_back(it->first);
      held.placements.push_back(
          head::BundlePlacement{driver_id_locked(it->first), p.gpu_ids, p.gpu_share});
    }
    if (held.placements.size() == reply.bundles.size()) held_[group_id] = held;
  }
  return held.placements;
}

void RemoteHeadClient::book_at(const std::string& group_id,
                               const std::vector<head::BundleRequest>& bundles,
                               const std::vector<head::BundlePlacement>& placements,
                               bool overcommit) {
  control::Restore m{group_id, {}, {}, overcommit};
  Held held{bundles, {}, placements};
  for (size_t b = 0; b < bundles.size() && b < placements.size(); ++b) {
    const auto& r = bundles[b];
    m.bundles.push_back(control::BundleSpec{r.cpus, r.gpus, r.memory_bytes, r.labels, r.resources});
    size_t head_host = head_id(placements[b].host);
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.hosts.push_back(known_.at(placements[b].host).host_name);
    }
    m.placed.push_back(control::PlacedBundle{static_cast<int64_t>(head_host), placements[b].gpu_ids,
                                             placements[b].gpu_share});
  }
  ask(control::Restore::kMethod, m.to_map());
  std::lock_guard<std::mutex> lock(mu_);
  held_[group_id] = std::move(held);
}

std::vector<control::HostResources> RemoteHeadClient::resources() {
  auto hosts = control::Resources::reply_from(ask(control::Resources::kMethod, {}));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& h : hosts) h.index = static_cast<int64_t>(driver_id_locked(h.name));
  std::sort(hosts.begin(), hosts.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  return hosts;
}

void RemoteHeadClient::tie_booking(const std::string& group_id, size_t host,
                                   const std::string& worker) {
  control::TieBooking m{group_id, static_cast<int64_t>(head_id(host)), worker};
  ask(control::TieBooking::kMethod, m.to_map());
}

bool RemoteHeadClient::release(const std::string& group_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_.erase(group_id);  // not booked again, also when the head is gone now
  }
  return ask(control::Release::kMethod, control::Release{group_id}.to_map()).as<bool>();
}

void RemoteHeadClient::release_unawaited(const std::string& group_id) {
  std::shared_ptr<transport::RpcPeer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_.erase(group_id);  // not booked again, also when the head is gone now
    peer = peer_;
  }
  auto warn = [address = address_, group_id](const std::string& why) {
    TROUPE_LOG(Warning) << "placement group " << group_id << " may not be released by the head at "
                        << address << " (" << why << ")";
  };
  if (peer->closed())
    return warn("the connection is closed: the head releases the bookings of a driver that left");
  peer->call(control::Release::kMethod, control::Release{group_id}.to_map(),
             std::string("head request '") + control::Release::kMethod + "'")
      .then([warn](const Future<Value>& f) {
        if (auto e = f.error()) warn(e->message());
      });
}

std::vector<std::string> RemoteHeadClient::describe_free() {
  return ask(control::DescribeFree::kMethod, {}).as<std::vector<std::string>>();
}

size_t RemoteHeadClient::reattach(std::shared_ptr<transport::RpcPeer> peer,
                                  std::chrono::milliseconds hosts_timeout) {
  std::map<std::string, Held> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    held = held_;
  }
  auto deadline = std::chrono::steady_clock::now() + hosts_timeout;
  for (;;) {  // until the head lists every host a reservation is on
    auto listed = list(peer);
    bool all = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, h] : held)
        for (const auto& p : h.placements) all = all && known_.at(p.host).alive;
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  size_t booked = 0;
  for (const auto& [id, h] : held) {
    try {
      control::Restore m{id, {}, {}};
      for (size_t b = 0; b < h.bundles.size(); ++b) {
        const auto& r = h.bundles[b];
        m.bundles.push_back(
            control::BundleSpec{r.cpus, r.gpus, r.memory_bytes, r.labels, r.resources});
        std::lock_guard<std::mutex> lock(mu_);
        auto it = head_ids_.find(h.hosts[b]);
        if (it == head_ids_.end() || !known_.at(h.placements[b].host).alive)
          throw Error(ErrorCode::kResourceUnavailable,
                      "its host " + h.hosts[b] + " is not registered with the head");
        m.placed.push_back(control::PlacedBundle{
            static_cast<int64_t>(it->second), h.placements[b].gpu_ids, h.placements[b].gpu_share});
      }
      ask_on(peer, control::Restore::kMethod, m.to_map());
      ++booked;
    } catch (const Error& e) {
      if (peer->closed()) throw;
      TROUPE_LOG(Warning) << "placement group " << id << " is not booked with the head at "
                          << address_ << " (" << e.message()
                          << "): its resources may be given to others";
      std::lock_guard<std::mutex> lock(mu_);
      held_.erase(id);
      continue;
    }
    bool released;
    {
      std::lock_guard<std::mutex> lock(mu_);
      released = !held_.count(id);
    }
    if (released)  // while it was being booked again
      ask_on(peer, control::Release::kMethod, control::Release{id}.to_map());
  }
  std::lock_guard<std::mutex> lock(mu_);
  peer_ = std::move(peer);
  return booked;
}

Value RemoteHeadClient::ask(const char* method, const Map& kwargs) {
  std::shared_ptr<transport::RpcPeer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer = peer_;
  }
  return ask_on(peer, method, kwargs);
}

Value RemoteHeadClient::ask_on(const std::shared_ptr<transport::RpcPeer>& peer, const char* method,
                               const Map& kwargs) {
  if (peer->closed())
    throw Error(
        ErrorCode::kConnectionLost,
        "the head at " + address_ + " is gone: placements need it (calls to live workers go on)");
  try {
    return peer->call(method, kwargs, std::string("head request '") + method + "'").get(timeout_);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kConnectionLost || e.code() == ErrorCode::kTimeout)
      throw Error(e.code(), "the head at " + address_ + " did not answer " + method + " (" +
                                e.message() +
                                "): placements need it (calls to live workers go on)");
    throw;
  }
}

}  // namespace troupe::internal
