// VirtualCluster: resource bundles reserved on the hosts of a Cluster, grouped in placement
// groups, for worker groups to start on (the reference design's RayVirtualCluster).
//
//   troupe::Cluster runtime(troupe::ClusterOptions::local(2, /*gpus_per_host=*/2));
//   troupe::VirtualCluster vc(runtime, {.bundle_ct_per_node_list = {2, 2}, .use_gpus = true});
//   vc.world_size();  // 4 bundles: 2 on each host, 1 GPU each
//
// A bundle is {CPUs, GPUs, memory, labels} on one host. With use_gpus, each bundle holds a
// 1/max_colocated_worker_groups share of one GPU, so that many worker groups can colocate on the
// same GPUs. Reservations are made at the head, all or nothing.
//
// Invariants (cited by tests):
//   VC-1 every placement group's bundles are reserved at the head before the constructor returns,
//        or none are (the constructor throws kResourceUnavailable saying what was asked and what
//        exists).
//   VC-2 get_master_address_and_port returns a port no other call on this cluster returned.
//   VC-3 shutdown releases every reservation and port; it is idempotent and runs on destruction.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "troupe/cluster.h"

namespace troupe {

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };
// "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD".
const char* placement_strategy_name(PlacementStrategy strategy);
// Parses the names above; throws Error(kInvalidArgument) listing them.
PlacementStrategy parse_placement_strategy(const std::string& name);

struct Bundle {
  double num_cpus = 1;
  double num_gpus = 0;  // a share < 1 of one GPU, or whole GPUs
  int64_t memory_bytes = 0;
  std::map<std::string, std::string> labels;  // the host must carry these
  // Where the head placed it:
  size_t host = 0;
  std::string host_name;
  std::string address;
  std::vector<int> gpu_ids;
};

struct PlacementGroup {
  std::string id;
  PlacementStrategy strategy = PlacementStrategy::kStrictPack;
  std::vector<Bundle> bundles;
  size_t bundle_count() const { return bundles.size(); }
};

struct AddressAndPort {
  std::string address;
  int port = 0;
};

struct VirtualClusterOptions {
  // Bundles wanted on each node, e.g. {8, 8}: one placement group per entry (packed on one
  // host), unless use_unified_placement_group.
  std::vector<size_t> bundle_ct_per_node_list;
  bool use_gpus = true;
  // GPU share of a bundle is 1/max_colocated_worker_groups.
  int max_colocated_worker_groups = 1;
  // GPUs a node has; a node's bundle count may not exceed it when use_gpus.
  int num_gpus_per_node = 8;
  std::string name = "vc";
  // One placement group with every bundle and this strategy (instead of one per node).
  bool use_unified_placement_group = false;
  PlacementStrategy placement_strategy = PlacementStrategy::kSpread;
  // A unified group orders its bundles by this host label, then by host index, then GPU.
  std::string topology_label = "topology";
  double cpus_per_bundle = 1;
  int64_t memory_per_bundle = 0;
  std::map<std::string, std::string> bundle_labels;
  // Ports handed to worker groups come from [port_range_begin, port_range_end) of each host: one
  // per worker and one MASTER_PORT per group. Hosts simulated on one machine share its ports
  // (src/agent/port_book.h), so the default 4,000 ports serve a group of 1,024 workers over 16
  // simulated hosts three times over. The range sits below the kernel's ephemeral ports.
  int port_range_begin = 1400;
  int port_range_end = 5400;
  // Creation retries with exponential backoff, within the overall timeout.
  int max_retries = 3;
  std::chrono::milliseconds retry_backoff{200};
  std::chrono::milliseconds creation_timeout{30000};
  // Wait for resources other drivers hold, as a Ray placement group does: creation waits up to
  // creation_timeout (max_retries does not apply), listed by `troupe status` as waiting with the
  // reason, and tries again each time the head says resources were freed.
  bool wait_for_resources = false;
};

namespace internal {
class VirtualClusterImpl;  // defined inside the library only
struct Access;             // the library's own access to it
}  // namespace internal

class VirtualCluster {
 public:
  // Reserves the placement groups (VC-1); retries with backoff while resources are missing.
  // Throws Error(kResourceUnavailable) when they never fit, kInvalidArgument for bad options.
  VirtualCluster(Cluster& runtime, VirtualClusterOptions options);
  ~VirtualCluster();  // shutdown()
  VirtualCluster(const VirtualCluster&) = delete;
  VirtualCluster& operator=(const VirtualCluster&) = delete;

  const VirtualClusterOptions& options() const;
  Cluster& runtime();
  // Total bundles over all placement groups.
  size_t world_size() const;
  // Number of distinct hosts the bundles are on.
  size_t node_count() const;
  const std::vector<PlacementGroup>& get_placement_groups() const;
  // The address of the first bundle's host and a port reserved there, new at each call (VC-2).
  AddressAndPort get_master_address_and_port();
  // For each (placement group index, bundle index): the bundle's host address and a port
  // reserved on that host. Throws Error(kInvalidArgument) for an index out of range.
  std::vector<AddressAndPort> get_available_addresses_and_ports_batch(
      const std::vector<std::pair<size_t, size_t>>& bundles);
  // Releases every reservation and port (VC-3). Idempotent; thread-safe. A standing head's
  // releases are sent without waiting for its answers (as Ray's remove_placement_group): what
  // this driver asks the head afterwards is served after them; another driver sees the
  // resources free a moment later (a failure to release is logged as a warning).
  void shutdown();
  bool is_shut_down() const;

 private:
  friend struct internal::Access;
  std::unique_ptr<internal::VirtualClusterImpl> impl_;
};

}  // namespace troupe
