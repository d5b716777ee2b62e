// 1,000 placement groups of 8 bundles on 100 hosts, booked by the head (issue 32 item 5): created
// one after another, then removed, PACK and then SPREAD, on an embedded cluster of 100
// simulated hosts of 80 CPUs each, every bundle 1 CPU, so the 1,000 groups fill the cluster
// exactly. A plain harness; what it checks (exits 1 otherwise):
//   PACK     every group's 8 bundles on one host
//   SPREAD   every group's 8 bundles on 8 distinct hosts
//   both     80 bundles on every host once all 1,000 exist (the cluster is full), and the
//            SPREAD round fits at all only because PACK's removal freed every CPU
// The floor, in the same run: 1,000 x (8 inserts into and 8 erases from a std::map under a
// mutex), the bookkeeping alone. Ray's published rate is ~700 placement groups/s created and
// removed (not measured here).
//
//   build/bench/placement_scale [--groups 1000] [--hosts 100]
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "troupe/troupe.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBundles = 8;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double floor_seconds(size_t groups) {
  std::mutex mu;
  std::map<std::string, double> booked;
  auto t0 = Clock::now();
  for (size_t g = 0; g < groups; ++g) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t b = 0; b < kBundles; ++b) booked["pg-" + std::to_string(g * kBundles + b)] = 1;
  }
  for (size_t g = 0; g < groups; ++g) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t b = 0; b < kBundles; ++b) booked.erase("pg-" + std::to_string(g * kBundles + b));
  }
  return seconds_since(t0);
}

struct Round {
  double create_s = 0, remove_s = 0;
  bool ok = true;
};

Round run(troupe::Cluster& cluster, size_t groups, size_t hosts, double cpus_per_host,
          troupe::PlacementStrategy strategy) {
  Round round;
  std::vector<std::unique_ptr<troupe::VirtualCluster>> made;
  made.reserve(groups);
  const char* name = troupe::placement_strategy_name(strategy);
  auto t0 = Clock::now();
  for (size_t g = 0; g < groups; ++g) {
    troupe::VirtualClusterOptions v;
    v.bundle_ct_per_node_list = {kBundles};
    v.use_unified_placement_group = true;
    v.placement_strategy = strategy;
    v.use_gpus = false;
    v.cpus_per_bundle = 1;
    v.max_retries = 0;
    v.name = std::string(name) + "-" + std::to_string(g);
    made.push_back(std::make_unique<troupe::VirtualCluster>(cluster, v));
  }
  round.create_s = seconds_since(t0);

  std::vector<size_t> per_host(hosts, 0);
  for (const auto& vc : made) {
    std::set<size_t> on;
    for (const auto& pg : vc->get_placement_groups())
      for (const auto& b : pg.bundles) {
        on.insert(b.host);
        ++per_host[b.host];
      }
    const size_t want = strategy == troupe::PlacementStrategy::kPack ? 1 : kBundles;
    if (on.size() != want) {
      std::printf("FAIL %s: %s is on %zu hosts, not %zu\n", name, vc->options().name.c_str(),
                  on.size(), want);
      round.ok = false;
    }
  }
  for (size_t h = 0; h < hosts; ++h)
    if (per_host[h] != static_cast<size_t>(cpus_per_host)) {
      std::printf("FAIL %s: host %zu holds %zu bundles, not %.0f\n", name, h, per_host[h],
                  cpus_per_host);
      round.ok = false;
    }

  t0 = Clock::now();
  for (auto& vc : made) vc->shutdown();
  round.remove_s = seconds_since(t0);
  return round;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  size_t groups = 1000, hosts = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--groups")
      groups = std::stoul(argv[i + 1]);
    else if (flag == "--hosts")
      hosts = std::stoul(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s (--groups, --hosts)\n", flag.c_str());
      return 2;
    }
  }
  if ((groups * kBundles) % hosts != 0) {
    std::fprintf(stderr, "%zu groups of %zu bundles do not fill %zu hosts evenly\n", groups,
                 kBundles, hosts);
    return 2;
  }
  const double cpus_per_host = static_cast<double>(groups * kBundles / hosts);
  troupe::ClusterOptions options =
      troupe::ClusterOptions::local(hosts, /*gpus_per_host=*/0, cpus_per_host);
  options.log_to_driver = false;
  troupe::Cluster cluster(options);

  const double floor = floor_seconds(groups);
  Round pack = run(cluster, groups, hosts, cpus_per_host, troupe::PlacementStrategy::kPack);
  Round spread = run(cluster, groups, hosts, cpus_per_host, troupe::PlacementStrategy::kSpread);
  cluster.shutdown();

  std::printf("%zu placement groups of %zu bundles on %zu hosts of %.0f CPUs\n", groups, kBundles,
              hosts, cpus_per_host);
  for (auto [name, r] : {std::pair{"PACK", pack}, std::pair{"SPREAD", spread}}) {
    const double total = r.create_s + r.remove_s;
    std::printf(
        "%-7s create %.3f s (%.0f/s), remove %.3f s (%.0f/s), create+remove %.0f/s; "
        "%.1fx the floor (%.4f s)%s\n",
        name, r.create_s, groups / r.create_s, r.remove_s, groups / r.remove_s, groups / total,
        total / floor, floor, r.ok ? "" : "  CHECKS FAILED");
  }
  return pack.ok && spread.ok ? 0 : 1;
}
