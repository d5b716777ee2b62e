#include "troupe/resources.h"

#include <string_view>

#include "common/launch_env.h"
#include "controller/access.h"
#include "controller/cluster_impl.h"
#include "controller/head_client.h"
#include "head/placement.h"

namespace troupe {
namespace {

static_assert(std::string_view(kResourceLabelPrefix) == agent_env::kResourceLabelPrefix,
              "the head reads the labels the public API names");

internal::HeadClient& head_of(Cluster& cluster) {
  return internal::Access::impl(cluster).head_client();
}

std::vector<head::BundleRequest> to_head(const std::vector<ResourceRequest>& bundles) {
  std::vector<head::BundleRequest> out;
  out.reserve(bundles.size());
  for (const auto& b : bundles)
    out.push_back(
        head::BundleRequest{b.num_cpus, b.num_gpus, b.memory_bytes, b.labels, b.resources});
  return out;
}

}  // namespace

std::optional<std::vector<BookedBundle>> try_book(Cluster& cluster, const std::string& id,
                                                  const std::vector<ResourceRequest>& bundles,
                                                  const std::string& strategy,
                                                  std::optional<size_t> only_host,
                                                  const std::string& waiting_as) {
  std::vector<head::BundlePlacement> placed;
  try {
    placed = head_of(cluster).reserve(id, to_head(bundles), head::parse_strategy(strategy),
                                      only_host, waiting_as);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kResourceUnavailable) return std::nullopt;
    throw;
  }
  std::vector<BookedBundle> out;
  for (auto& p : placed) out.push_back(BookedBundle{p.host, std::move(p.gpu_ids), p.gpu_share});
  return out;
}

void book_at(Cluster& cluster, const std::string& id, const std::vector<ResourceRequest>& bundles,
             const std::vector<BookedBundle>& placements, bool overcommit) {
  std::vector<head::BundlePlacement> at;
  for (const auto& p : placements)
    at.push_back(head::BundlePlacement{p.host, p.gpu_ids, p.gpu_share});
  head_of(cluster).book_at(id, to_head(bundles), at, overcommit);
}

bool unbook(Cluster& cluster, const std::string& id) { return head_of(cluster).release(id); }

void tie_booking_to_worker(Cluster& cluster, const std::string& id, const Worker& worker) {
  head_of(cluster).tie_booking(id, worker.host(), worker.agent_name());
}

std::vector<HostResources> host_resources(Cluster& cluster) {
  std::vector<HostResources> out;
  for (auto& h : head_of(cluster).resources())
    out.push_back(HostResources{static_cast<size_t>(h.index), std::move(h.name), h.alive, h.cpus,
                                h.cpus_free, std::move(h.gpu_ids), std::move(h.gpus_free),
                                h.memory_bytes, h.memory_free, std::move(h.resources),
                                std::move(h.resources_free)});
  return out;
}

uint64_t on_resources_freed(Cluster& cluster, std::function<void()> listener) {
  return head_of(cluster).add_freed_listener(std::move(listener));
}

void remove_resources_freed_listener(Cluster& cluster, uint64_t id) {
  head_of(cluster).remove_freed_listener(id);
}

}  // namespace troupe
