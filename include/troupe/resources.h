// Resources booked at the head, outside any VirtualCluster: what a Ray-style runtime over troupe
// (troupe.ray's actors, tasks and placement groups) holds. The head keeps one book for every
// driver of a cluster, so two drivers never hand out the same CPUs, GPUs or custom resources; a
// driver's bookings are freed when it exits or its connection to the head is lost.
//
//   troupe::Cluster cluster(troupe::ClusterOptions::connect("10.0.0.1:6380"));
//   auto got = troupe::try_book(cluster, "trainer-pg", {{.num_gpus = 1}, {.num_gpus = 1}},
//                               "STRICT_SPREAD", std::nullopt, "placement group trainer-pg");
//   if (!got) { /* waiting: troupe status lists it; on_resources_freed says when to retry */ }
//
// Threads: every function is thread-safe and may block for one round trip to the head; none may
// be called from a listener.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/cluster.h"

namespace troupe {

// One bundle: amounts that must all be on one host.
struct ResourceRequest {
  double num_cpus = 0;
  double num_gpus = 0;  // 0, a share < 1 of one GPU, or a whole number of whole GPUs
  int64_t memory_bytes = 0;
  // Named amounts: custom resources (`troupe start --resources`), "object_store_memory",
  // "node:<address>" (1 per host).
  std::map<std::string, double> resources;
  std::map<std::string, std::string> labels;  // the host must carry these
};

// Where a booked bundle went.
struct BookedBundle {
  size_t host = 0;  // index into Cluster::hosts()
  std::vector<int> gpu_ids;
  double gpu_share = 0;  // of each listed GPU: 1 for whole GPUs
};

// What one host has and has free, every driver's bookings counted.
struct HostResources {
  size_t host = 0;
  std::string name;
  bool alive = false;
  double num_cpus = 0, cpus_free = 0;
  std::vector<int> gpu_ids;
  std::vector<double> gpus_free;  // free share of each of gpu_ids
  int64_t memory_bytes = 0, memory_free = 0;
  std::map<std::string, double> resources, resources_free;
};

// Books `bundles` under `id` (unique among this driver's bookings) with `strategy` ("PACK",
// "SPREAD", "STRICT_PACK", "STRICT_SPREAD"), all or nothing, only on host `only_host` when set.
// Returns where each bundle went, or nullopt when they do not fit now. With `waiting_as`
// non-empty (e.g. "placement group pg-1"), the head lists this driver as waiting for them, with
// the reason, in `troupe status` until a booking with the same `waiting_as` succeeds or `id` is
// unbooked, and the on_resources_freed listeners are called whenever trying again may succeed.
// Throws Error(kInvalidArgument) for a bad request, another Error when the head is unreachable.
std::optional<std::vector<BookedBundle>> try_book(Cluster& cluster, const std::string& id,
                                                  const std::vector<ResourceRequest>& bundles,
                                                  const std::string& strategy,
                                                  std::optional<size_t> only_host,
                                                  const std::string& waiting_as = "");
// Books `id` exactly where `placements` say; with `overcommit`, even where the host's free
// amounts do not hold it (a task taking back what it lent while it waited, as Ray's raylet
// does). Throws Error(kResourceUnavailable) when it does not fit, another Error otherwise.
void book_at(Cluster& cluster, const std::string& id, const std::vector<ResourceRequest>& bundles,
             const std::vector<BookedBundle>& placements, bool overcommit);
// Ties booking `id` to `worker` (a detached worker, whose resources must outlive this driver):
// from now on this driver's exit does not free it; the worker's exit, its host's agent leaving
// or unbook (from any driver) does. Throws Error(kInvalidArgument) for an id not booked.
void tie_booking_to_worker(Cluster& cluster, const std::string& id, const Worker& worker);
// Frees booking `id`; idempotent. Returns whether it existed.
bool unbook(Cluster& cluster, const std::string& id);
// Every host's capacity and free amounts.
std::vector<HostResources> host_resources(Cluster& cluster);
// Calls `listener` when a booking this driver waits for (try_book with waiting_as) may fit now.
// It runs on one of troupe's threads, must not block and must not call troupe back (post
// instead). Returns an id for remove_resources_freed_listener.
uint64_t on_resources_freed(Cluster& cluster, std::function<void()> listener);
void remove_resources_freed_listener(Cluster& cluster, uint64_t id);

}  // namespace troupe
