// Resource accounting and bundle placement for placement groups, with Ray's semantics.
//
// The head keeps one ResourceBook: what every host has (CPUs, GPU ids, memory, labels, whether
// it is alive) and which placement group reserved what. reserve() places all bundles of a group
// or none; release() gives them back. Placement is deterministic: the same book and request
// always give the same hosts and GPU ids, ties broken by host index, then GPU id.
//
// GPUs: every GPU id has capacity 1.0. A bundle asks for 0 GPUs, a share s < 1 of ONE GPU, or a
// whole number n >= 1 of completely free GPUs. Shares prefer a GPU that other groups already
// use partially (so worker groups sharing GPUs colocate on the same ids), but spread the bundles
// of one request over distinct GPUs first. Float comparisons use kEpsilon, so 3 x 1/3 fits.
//
// Not thread-safe: the head holds its lock around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace troupe::head {

inline constexpr double kEpsilon = 1e-9;

enum class Strategy {
  kPack,          // as few hosts as possible; may use several
  kSpread,        // distinct hosts as far as possible (most free CPUs first), then wrap around
  kStrictPack,    // all bundles on one host, else fail
  kStrictSpread,  // every bundle on a different host, else fail
};

// "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD" (exact spelling); anything else throws
// Error(kInvalidArgument) listing the four.
Strategy parse_strategy(const std::string& name);
// The inverse of parse_strategy. The pointer is to a static string.
const char* strategy_name(Strategy strategy);

// One bundle: resources that must all be on ONE host.
struct BundleRequest {
  double cpus = 1;
  double gpus = 0;           // 0; a share < 1 of one GPU; or a whole number >= 1 of whole GPUs
  int64_t memory_bytes = 0;  // 0: no memory requirement
  std::map<std::string, std::string> labels;  // the host must carry all of these (key=value)
  // Named amounts (Ray's custom resources, "object_store_memory", "node:<address>"): the host
  // must have this much of each free. Amounts <= kEpsilon ask for nothing.
  std::map<std::string, double> resources;
};

struct HostCapacity {
  std::string name;  // used in messages; empty means "host-<index>"
  double cpus = 0;
  std::vector<int> gpu_ids;  // distinct; ResourceBook keeps them sorted ascending
  int64_t memory_bytes = 0;  // 0: unknown; then only bundles asking for no memory fit
  std::map<std::string, std::string> labels;
  std::map<std::string, double> resources;  // named amounts it has (a missing name: 0)
  bool alive = true;
};

// Where one bundle went.
struct BundlePlacement {
  size_t host = 0;           // index into ResourceBook::hosts()
  std::vector<int> gpu_ids;  // ascending; empty when the bundle asked for no GPU
  double gpu_share = 0;      // of each listed GPU: 1.0 for whole GPUs, s for a share s < 1
};

// What one host has reserved; gpus[i] is the share used of hosts()[h].gpu_ids[i].
struct HostUsage {
  double cpus = 0;
  int64_t memory_bytes = 0;
  std::vector<double> gpus;
  std::map<std::string, double> resources;
};

// What one host has free, for messages and `troupe status`.
struct HostFree {
  double cpus = 0;
  std::vector<std::pair<int, double>> gpus;  // (GPU id, free share in [0, 1]), ascending ids
  int64_t memory_bytes = 0;                  // capacity minus reserved; 0 when capacity unknown
  std::map<std::string, double> resources;   // every named amount of the host, less what is held
};

class ResourceBook {
 public:
  // Throws Error(kInvalidArgument) for negative or non-finite capacities or duplicate GPU ids
  // on one host.
  explicit ResourceBook(std::vector<HostCapacity> hosts);

  // All-or-nothing: places every bundle with `strategy` and records the reservation under
  // `group_id`, returning one placement per bundle in request order. On failure throws and
  // reserves nothing:
  //  - kInvalidArgument: empty or duplicate group_id, no bundles, a negative or non-finite
  //    request, a GPU request >= 1 that is not a whole number, `only_host` out of range;
  //  - kResourceUnavailable: the bundles do not fit; the message says what was asked (bundle
  //    count, per-bundle resources, strategy) and what each host has free.
  // `only_host`, when set, restricts every bundle to that host index (per-host groups).
  std::vector<BundlePlacement> reserve(const std::string& group_id,
                                       const std::vector<BundleRequest>& bundles, Strategy strategy,
                                       std::optional<size_t> only_host = std::nullopt);

  // Books `group_id` again exactly where it was placed (by an earlier book: a head that
  // restarted, or that released a lost driver's reservations): bundle i on placements[i].host,
  // on its GPU ids with its share. All or nothing. Booking the same group with the same
  // placements twice is a no-op. Throws Error(kInvalidArgument) for a bad request (as reserve),
  // sizes that differ, a host or GPU id this book does not have, or an id already booked
  // elsewhere; Error(kResourceUnavailable) naming the host when its free resources do not hold
  // the bundle. With `overcommit`, a bundle is booked even where it does not fit (a task taking
  // back the resources it gave up while it waited in a nested get, as Ray's raylet does).
  void restore(const std::string& group_id, const std::vector<BundleRequest>& bundles,
               const std::vector<BundlePlacement>& placements, bool overcommit = false);

  // Frees a reservation; unknown ids are ignored (idempotent). Returns whether it existed.
  bool release(const std::string& group_id);

  // Dead hosts get no new bundles; their existing reservations stay until released. Throws
  // Error(kInvalidArgument) for an index out of range.
  void set_host_alive(size_t host, bool alive);
  // A host joins (index == hosts().size()) or (re)registers (index < hosts().size()): its
  // capacity becomes `capacity`, unless reservations still hold bundles there, in which case it
  // keeps its capacity and only takes `capacity.alive`. Throws Error(kInvalidArgument) for an
  // index past the end or an invalid capacity (as the constructor).
  void upsert_host(size_t index, HostCapacity capacity);

  const std::vector<HostCapacity>& hosts() const { return hosts_; }
  // The placements of a reserved group, or nullptr.
  const std::vector<BundlePlacement>* placements(const std::string& group_id) const;
  // The bundles a reserved group asked for, or nullptr.
  const std::vector<BundleRequest>* bundles(const std::string& group_id) const;
  size_t group_count() const { return groups_.size(); }
  // The ids of every reserved group, in id order.
  std::vector<std::string> group_ids() const {
    std::vector<std::string> ids;
    for (const auto& [id, r] : groups_) ids.push_back(id);
    return ids;
  }

  // Free resources of one host (index must be < hosts().size()).
  HostFree free_resources(size_t host) const;
  // e.g. "host-0 free {CPU 1.5/2, GPU 1.5/2 [0:0.5 1:1], memory 8 GiB/16 GiB}"; adds
  // " labels {k=v}" when the host has labels and " (dead)" when it is not alive.
  std::string describe_free(size_t host) const;

 private:
  struct Reservation {
    std::vector<BundleRequest> bundles;
    std::vector<BundlePlacement> placements;
  };

  void recompute_usage();

  std::vector<HostCapacity> hosts_;
  std::vector<HostUsage> used_;  // one per host
  std::map<std::string, Reservation> groups_;
};

}  // namespace troupe::head
