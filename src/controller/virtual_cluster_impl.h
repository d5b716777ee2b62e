// The state behind a VirtualCluster (see troupe/virtual_cluster.h). Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "controller/cluster_impl.h"
#include "head/placement.h"
#include "troupe/virtual_cluster.h"
#include "wire/control.h"

namespace troupe::internal {

head::Strategy to_head(PlacementStrategy s);

extern std::atomic<int> next_cluster_id;

class VirtualClusterImpl {
 public:
  VirtualClusterImpl(Cluster& runtime, VirtualClusterOptions options)
      : runtime_(runtime), options_(std::move(options)) {
    validate();
    id_ = Access::impl(runtime_).id_prefix() + options_.name + "-" +
          std::to_string(next_cluster_id++);
    reserve_with_retries();
  }
  ~VirtualClusterImpl() { shutdown(); }

  const VirtualClusterOptions& options() const { return options_; }
  Cluster& runtime() { return runtime_; }
  const std::vector<PlacementGroup>& groups() const { return groups_; }

  size_t world_size() const {
    size_t n = 0;
    for (const auto& g : groups_) n += g.bundles.size();
    return n;
  }

  size_t node_count() const {
    std::set<size_t> hosts;
    for (const auto& g : groups_)
      for (const auto& b : g.bundles) hosts.insert(b.host);
    return hosts.size();
  }

  const std::string& id() const { return id_; }

  // Reserves one port on the host of each (placement group, bundle), owned by `owner` (default:
  // this cluster). Thread-safe.
  std::vector<AddressAndPort> ports_for(const std::vector<std::pair<size_t, size_t>>& bundles,
                                        const std::string& owner = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) throw Error(ErrorCode::kShutdown, "virtual cluster " + id_ + " is shut down");
    // One reservation request per host, then hand the ports out in request order.
    std::map<size_t, int> per_host;
    std::vector<const Bundle*> targets;
    for (const auto& [pg, b] : bundles) {
      if (pg >= groups_.size() || b >= groups_[pg].bundles.size())
        throw Error(
            ErrorCode::kInvalidArgument,
            "bundle (" + std::to_string(pg) + ", " + std::to_string(b) +
                ") is out of range: the cluster has " + std::to_string(groups_.size()) +
                " placement groups" +
                (pg < groups_.size() ? " and group " + std::to_string(pg) + " has " +
                                           std::to_string(groups_[pg].bundles.size()) + " bundles"
                                     : ""));
      targets.push_back(&groups_[pg].bundles[b]);
      per_host[groups_[pg].bundles[b].host]++;
    }
    std::map<size_t, std::vector<int>> got;
    for (const auto& [host, count] : per_host) got[host] = reserve_ports_on(host, owner, count);
    std::map<size_t, size_t> next;
    std::vector<AddressAndPort> out;
    for (const Bundle* b : targets) out.push_back({b->address, got[b->host][next[b->host]++]});
    return out;
  }

  // A bundle that replaces one on a lost host, and the ports reserved for it there.
  struct Replacement {
    Bundle bundle;
    std::vector<int> ports;
  };
  // Reserves one bundle with this cluster's bundle resources on a live host other than `lost`,
  // preferring hosts this cluster does not use yet (so that a node stays a host of its own), as
  // a placement group of its own (ID-reN, released at shutdown), and `port_count` ports there
  // owned by `owner`. Blocks on the head and that host's agent. Throws
  // Error(kResourceUnavailable) naming `lost` when no other live host has room.
  Replacement replace_bundle(size_t lost, const std::string& owner, int port_count) {
    auto hosts = runtime_.hosts();
    auto& head = Access::impl(runtime_).head_client();
    std::string group_id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) throw Error(ErrorCode::kShutdown, "virtual cluster " + id_ + " is shut down");
      group_id = id_ + "-re" + std::to_string(replacement_groups_.size());
      replacement_groups_.push_back(group_id);  // released at shutdown, reserved or not
    }
    head::BundleRequest request = bundle_request();
    std::set<size_t> used;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& g : groups_)
        for (const auto& b : g.bundles) used.insert(b.host);
    }
    std::stable_partition(hosts.begin(), hosts.end(),
                          [&](const HostInfo& h) { return used.count(h.index) == 0; });
    for (const auto& h : hosts) {
      if (h.index == lost || !h.alive) continue;
      std::vector<head::BundlePlacement> placed;
      try {
        placed = head.reserve(group_id, {request}, head::Strategy::kStrictPack, h.index);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kResourceUnavailable) continue;
        throw;
      }
      Replacement r;
      r.bundle.num_cpus = request.cpus;
      r.bundle.num_gpus = request.gpus;
      r.bundle.memory_bytes = request.memory_bytes;
      r.bundle.labels = request.labels;
      r.bundle.host = h.index;
      r.bundle.host_name = h.name;
      r.bundle.address = h.address;
      r.bundle.gpu_ids = placed.at(0).gpu_ids;
      if (port_count > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        r.ports = reserve_ports_on(h.index, owner, port_count);
      }
      return r;
    }
    std::string lost_name = lost < hosts.size() ? hosts[lost].name : std::to_string(lost);
    throw Error(ErrorCode::kResourceUnavailable,
                "no live host other than the lost " + lost_name + " has room for a bundle of " +
                    std::to_string(request.cpus) + " CPUs and " + std::to_string(request.gpus) +
                    " GPUs of virtual cluster '" + options_.name + "'");
  }

  // Releases the ports reserved for `owner` on every host.
  void release_ports(const std::string& owner) {
    std::set<size_t> hosts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hosts = ports_hosts_;
    }
    for (size_t host : hosts) {
      if (auto agent = Access::impl(runtime_).connected_agent(host))
        agent->release_ports(wire::control::ReleasePorts{owner})
            .wait_until(Clock::now() + std::chrono::seconds(5));
    }
  }

  void shutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    std::vector<std::string> ids = replacement_groups_;
    for (const auto& g : groups_) ids.push_back(g.id);
    for (const auto& id : ids) Access::impl(runtime_).head_client().release_unawaited(id);
    for (size_t host : ports_hosts_) {
      if (auto agent = Access::impl(runtime_).connected_agent(host))
        agent->release_ports(wire::control::ReleasePorts{id_})
            .wait_until(Clock::now() + std::chrono::seconds(5));
    }
    groups_.clear();
  }

  bool is_shut_down() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shut_down_;
  }

 private:
  void validate() {
    const auto& o = options_;
    if (o.bundle_ct_per_node_list.empty())
      throw Error(ErrorCode::kInvalidArgument, "bundle_ct_per_node_list is empty");
    for (size_t i = 0; i < o.bundle_ct_per_node_list.size(); ++i) {
      if (o.bundle_ct_per_node_list[i] == 0)
        throw Error(ErrorCode::kInvalidArgument,
                    "bundle_ct_per_node_list[" + std::to_string(i) + "] is 0");
      if (o.use_gpus && o.bundle_ct_per_node_list[i] > static_cast<size_t>(o.num_gpus_per_node))
        throw Error(ErrorCode::kInvalidArgument, "node " + std::to_string(i) + " asks for " +
                                                     std::to_string(o.bundle_ct_per_node_list[i]) +
                                                     " GPU bundles but num_gpus_per_node is " +
                                                     std::to_string(o.num_gpus_per_node));
    }
    if (o.max_colocated_worker_groups < 1)
      throw Error(ErrorCode::kInvalidArgument, "max_colocated_worker_groups must be at least 1");
    if (o.port_range_begin <= 0 || o.port_range_end > 65536 ||
        o.port_range_begin >= o.port_range_end)
      throw Error(ErrorCode::kInvalidArgument, "bad port range [" +
                                                   std::to_string(o.port_range_begin) + ", " +
                                                   std::to_string(o.port_range_end) + ")");
  }

  head::BundleRequest bundle_request() const {
    head::BundleRequest r;
    r.cpus = options_.cpus_per_bundle;
    r.gpus = options_.use_gpus ? 1.0 / options_.max_colocated_worker_groups : 0.0;
    r.memory_bytes = options_.memory_per_bundle;
    r.labels = options_.bundle_labels;
    return r;
  }

  // Reserves every placement group, or none (and throws).
  void reserve_all() {
    std::vector<std::pair<std::string, std::vector<head::BundleRequest>>> wanted;
    std::vector<PlacementStrategy> strategies;
    const auto& list = options_.bundle_ct_per_node_list;
    if (options_.use_unified_placement_group) {
      size_t total = 0;
      for (size_t n : list) total += n;
      wanted.emplace_back(id_ + "-pg0", std::vector<head::BundleRequest>(total, bundle_request()));
      strategies.push_back(options_.placement_strategy);
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        wanted.emplace_back(id_ + "-pg" + std::to_string(i),
                            std::vector<head::BundleRequest>(list[i], bundle_request()));
        strategies.push_back(PlacementStrategy::kStrictPack);
      }
    }
    auto& head = Access::impl(runtime_).head_client();
    // The hosts as last listed: listed again only when a bundle went to one not known alive.
    auto hosts = Access::impl(runtime_).hosts(false);
    if (hosts.empty()) hosts = runtime_.hosts();
    std::vector<PlacementGroup> groups;
    try {
      for (size_t i = 0; i < wanted.size(); ++i) {
        auto placed =
            options_.use_unified_placement_group
                ? head.reserve(wanted[i].first, wanted[i].second, to_head(strategies[i]),
                               std::nullopt, waiting_as())
                : reserve_node_group(head, wanted[i].first, wanted[i].second, groups, hosts.size());
        for (const auto& p : placed)
          if (p.host >= hosts.size() || !hosts[p.host].alive) {
            hosts = runtime_.hosts();
            break;
          }
        PlacementGroup g;
        g.id = wanted[i].first;
        g.strategy = strategies[i];
        for (size_t b = 0; b < placed.size(); ++b) {
          Bundle bundle;
          bundle.num_cpus = wanted[i].second[b].cpus;
          bundle.num_gpus = wanted[i].second[b].gpus;
          bundle.memory_bytes = wanted[i].second[b].memory_bytes;
          bundle.labels = wanted[i].second[b].labels;
          bundle.host = placed[b].host;
          bundle.host_name = hosts.at(placed[b].host).name;
          bundle.address = hosts.at(placed[b].host).address;
          bundle.gpu_ids = placed[b].gpu_ids;
          g.bundles.push_back(std::move(bundle));
        }
        if (options_.use_unified_placement_group) order_by_topology(g, hosts);
        groups.push_back(std::move(g));
      }
    } catch (...) {
      for (const auto& g : groups) {
        try {
          if (head.release(g.id)) ++rolled_back_;
        } catch (const Error&) {  // the head is gone: nothing stays reserved there
        }
      }
      throw;
    }
    groups_ = std::move(groups);
  }

  // A per-node group goes to a host that no earlier group of this cluster uses, when one fits,
  // so that node i of the cluster is a host of its own.
  std::vector<head::BundlePlacement> reserve_node_group(
      HeadClient& head, const std::string& id, const std::vector<head::BundleRequest>& bundles,
      const std::vector<PlacementGroup>& earlier, size_t host_count) {
    std::set<size_t> used;
    for (const auto& g : earlier)
      for (const auto& b : g.bundles) used.insert(b.host);
    for (size_t h = 0; h < host_count; ++h) {
      if (used.count(h)) continue;
      try {
        return head.reserve(id, bundles, head::Strategy::kStrictPack, h, waiting_as());
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kResourceUnavailable) throw;
      }
    }
    return head.reserve(id, bundles, head::Strategy::kStrictPack, std::nullopt, waiting_as());
  }

  // How the head lists this cluster while it waits for resources ("": it does not wait).
  std::string waiting_as() const {
    return options_.wait_for_resources ? "virtual cluster " + options_.name + " (" + id_ + ")"
                                       : std::string();
  }

  // Ranks follow the physical layout: topology label, then host index, then GPU.
  void order_by_topology(PlacementGroup& g, const std::vector<HostInfo>& hosts) const {
    auto label = [&](size_t host) {
      auto it = hosts.at(host).labels.find(options_.topology_label);
      return it == hosts.at(host).labels.end() ? std::string() : it->second;
    };
    std::stable_sort(g.bundles.begin(), g.bundles.end(), [&](const Bundle& a, const Bundle& b) {
      auto ka = std::make_tuple(label(a.host), a.host, a.gpu_ids.empty() ? -1 : a.gpu_ids[0]);
      auto kb = std::make_tuple(label(b.host), b.host, b.gpu_ids.empty() ? -1 : b.gpu_ids[0]);
      return ka < kb;
    });
  }

  // Reserves `count` ports on `host` for `owner` (default: this cluster) through its agent
  // (blocking, at most 30 s). Callers hold mu_.
  std::vector<int> reserve_ports_on(size_t host, const std::string& owner, int count) {
    auto agent = Access::impl(runtime_).agent(host);
    wire::control::ReservePorts request{owner.empty() ? id_ : owner, count,
                                        options_.port_range_begin, options_.port_range_end};
    std::vector<int> ports = agent->reserve_ports(request).get(std::chrono::seconds(30));
    if (ports.size() != static_cast<size_t>(count))
      throw Error(ErrorCode::kProtocol, "the agent of host " + std::to_string(host) + " reserved " +
                                            std::to_string(ports.size()) + " ports, asked for " +
                                            std::to_string(count));
    ports_hosts_.insert(host);
    return ports;
  }

  // wait_for_resources: tries again each time the head says resources were freed (or the driver
  // connected to a restarted head again), until the deadline. The releases of its own rollback
  // (reserve_all gives back the groups it placed when a later one does not fit) notify it too; they
  // are counted out, so only another's release (or a host joining) wakes it.
  void reserve_waiting() {
    auto deadline = Clock::now() + options_.creation_timeout;
    auto& head = Access::impl(runtime_).head_client();
    struct Freed {
      std::mutex mu;
      std::condition_variable cv;
      uint64_t count = 0;
    };
    auto freed = std::make_shared<Freed>();
    uint64_t listener = head.add_freed_listener([freed] {
      std::lock_guard<std::mutex> lock(freed->mu);
      ++freed->count;
      freed->cv.notify_all();
    });
    struct Unlisten {
      HeadClient& head;
      uint64_t id;
      ~Unlisten() { head.remove_freed_listener(id); }
    } unlisten{head, listener};
    bool told = false;
    for (;;) {
      uint64_t before;
      {
        std::lock_guard<std::mutex> lock(freed->mu);
        before = freed->count;
      }
      rolled_back_ = 0;
      try {
        reserve_all();
        return;
      } catch (const Error& e) {
        // A head that is gone comes back (the driver reconnects and tells the waiters): wait.
        if (e.code() != ErrorCode::kResourceUnavailable && e.code() != ErrorCode::kConnectionLost)
          throw;
        if (!told)
          TROUPE_LOG(Info) << "virtual cluster '" << options_.name
                           << "' waits for resources (up to " << options_.creation_timeout.count()
                           << " ms): " << e.message();
        told = true;
        std::unique_lock<std::mutex> lock(freed->mu);
        bool woke = freed->cv.wait_until(lock, deadline,
                                         [&] { return freed->count - before > rolled_back_; });
        if (!woke)
          throw Error(ErrorCode::kResourceUnavailable,
                      "virtual cluster '" + options_.name + "' waited " +
                          std::to_string(options_.creation_timeout.count()) +
                          " ms for resources: " + e.message());
      }
    }
  }

  void reserve_with_retries() {
    if (options_.wait_for_resources) return reserve_waiting();
    auto deadline = Clock::now() + options_.creation_timeout;
    auto backoff = options_.retry_backoff;
    for (int attempt = 0;; ++attempt) {
      try {
        reserve_all();
        return;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kResourceUnavailable) throw;
        bool last = attempt >= options_.max_retries || Clock::now() + backoff >= deadline;
        if (last)
          throw Error(ErrorCode::kResourceUnavailable,
                      "virtual cluster '" + options_.name + "' could not be placed after " +
                          std::to_string(attempt + 1) + " attempts: " + e.message());
        TROUPE_LOG(Warning) << "virtual cluster '" << options_.name << "': " << e.message()
                            << "; retrying in " << backoff.count() << " ms";
        std::this_thread::sleep_for(backoff);
        backoff *= 2;
      }
    }
  }

  Cluster& runtime_;
  VirtualClusterOptions options_;
  size_t rolled_back_ = 0;  // groups reserve_all gave back at its last failure (reserve_waiting)
  std::string id_;
  std::vector<PlacementGroup> groups_;
  std::set<size_t> ports_hosts_;
  std::vector<std::string> replacement_groups_;  // replace_bundle's placement groups
  mutable std::mutex mu_;
  bool shut_down_ = false;
};

}  // namespace troupe::internal
