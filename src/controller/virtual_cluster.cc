#include "troupe/virtual_cluster.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "common/log.h"
#include "controller/virtual_cluster_impl.h"

namespace troupe {
namespace internal {
std::atomic<int> next_cluster_id{0};

head::Strategy to_head(PlacementStrategy s) {
  switch (s) {
    case PlacementStrategy::kPack:
      return head::Strategy::kPack;
    case PlacementStrategy::kSpread:
      return head::Strategy::kSpread;
    case PlacementStrategy::kStrictPack:
      return head::Strategy::kStrictPack;
    case PlacementStrategy::kStrictSpread:
      return head::Strategy::kStrictSpread;
  }
  return head::Strategy::kSpread;
}

}  // namespace internal

const char* placement_strategy_name(PlacementStrategy s) {
  return head::strategy_name(internal::to_head(s));
}

PlacementStrategy parse_placement_strategy(const std::string& name) {
  switch (head::parse_strategy(name)) {
    case head::Strategy::kPack:
      return PlacementStrategy::kPack;
    case head::Strategy::kSpread:
      return PlacementStrategy::kSpread;
    case head::Strategy::kStrictPack:
      return PlacementStrategy::kStrictPack;
    case head::Strategy::kStrictSpread:
      return PlacementStrategy::kStrictSpread;
  }
  return PlacementStrategy::kSpread;
}

VirtualCluster::VirtualCluster(Cluster& runtime, VirtualClusterOptions options)
    : impl_(std::make_unique<internal::VirtualClusterImpl>(runtime, std::move(options))) {}
VirtualCluster::~VirtualCluster() = default;
const VirtualClusterOptions& VirtualCluster::options() const { return impl_->options(); }
Cluster& VirtualCluster::runtime() { return impl_->runtime(); }
size_t VirtualCluster::world_size() const { return impl_->world_size(); }
size_t VirtualCluster::node_count() const { return impl_->node_count(); }
const std::vector<PlacementGroup>& VirtualCluster::get_placement_groups() const {
  return impl_->groups();
}
AddressAndPort VirtualCluster::get_master_address_and_port() {
  return impl_->ports_for({{0, 0}}).front();
}
std::vector<AddressAndPort> VirtualCluster::get_available_addresses_and_ports_batch(
    const std::vector<std::pair<size_t, size_t>>& bundles) {
  return impl_->ports_for(bundles);
}
void VirtualCluster::shutdown() { impl_->shutdown(); }
bool VirtualCluster::is_shut_down() const { return impl_->is_shut_down(); }

}  // namespace troupe
