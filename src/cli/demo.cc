#include "cli/demo.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "troupe/troupe.h"

namespace {

// A worker class for the demo: it knows where it runs and does a little arithmetic.
class DemoWorker {
 public:
  explicit DemoWorker(int rank) : rank_(rank) {}
  std::string whoami() {
    const char* host = std::getenv("TROUPE_HOST_NAME");
    const char* cuda = std::getenv("CUDA_VISIBLE_DEVICES");
    return "rank " + std::to_string(rank_) + " pid " + std::to_string(::getpid()) + " on " +
           (host ? host : "?") + " CUDA_VISIBLE_DEVICES=" + (cuda ? cuda : "");
  }
  int64_t sum(std::vector<int64_t> values) {
    int64_t s = 0;
    for (auto v : values) s += v;
    return s * (rank_ + 1);
  }
  void noop() {}

 private:
  int rank_;
};

// A worker of a dp x tp group: reports the shard it received and its place in the mesh.
class DemoShard {
 public:
  std::string shard(std::vector<int64_t> batch, std::string step) {
    int64_t s = 0;
    for (auto v : batch) s += v;
    return std::string(std::getenv("TROUPE_WORKER_NAME") ? std::getenv("TROUPE_WORKER_NAME")
                                                         : "?") +
           " RANK=" + env("RANK") + " on " + env("TROUPE_HOST_NAME") + " GPU " +
           env("CUDA_VISIBLE_DEVICES") + ": " + step + " got batch sum " + std::to_string(s);
  }
  std::string replicated(std::string weights_version) {
    return "RANK " + env("RANK") + " loaded " + weights_version + " (MASTER " + env("MASTER_ADDR") +
           ":" + env("MASTER_PORT") + ")";
  }

 private:
  static std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
  }
};

TROUPE_WORKER_CLASS(DemoShard, cls) {
  cls.method("shard", &DemoShard::shard, {"batch", "step"});
  cls.method("replicated", &DemoShard::replicated, {"weights_version"});
}

TROUPE_WORKER_CLASS(DemoWorker, cls) {
  cls.constructor<int>({"rank"});
  cls.method("whoami", &DemoWorker::whoami);
  cls.method("sum", &DemoWorker::sum, {"values"});
  cls.method("noop", &DemoWorker::noop);
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

namespace troupe::cli {
namespace {

// What the demo runs on: an embedded cluster of `hosts` simulated hosts, or the standing cluster
// that TROUPE_ADDRESS names (its hosts are whatever agents joined its head).
struct DemoTarget {
  std::string standing_address;  // empty: embedded
  size_t hosts = 0;              // embedded: the simulated hosts asked for
};

DemoTarget demo_target(const DemoOptions& demo) {
  DemoTarget t;
  const char* address = std::getenv("TROUPE_ADDRESS");
  if (address != nullptr && *address != '\0') t.standing_address = address;
  t.hosts = demo.hosts;
  return t;
}

// The live hosts of `cluster` (a standing cluster lists lost hosts too).
std::vector<HostInfo> live_hosts(const Cluster& cluster) {
  std::vector<HostInfo> out;
  for (auto& h : cluster.hosts())
    if (h.alive) out.push_back(h);
  return out;
}

}  // namespace

int run_demo(const DemoOptions& demo) {
  const int hold_seconds = demo.hold_seconds;
  const DemoTarget target = demo_target(demo);
  // Line-buffered: the demo's lines and the cluster's progress lines (stderr) keep their order
  // when both go to one pipe or file.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    auto t0 = std::chrono::steady_clock::now();
    // The banner comes before anything else the demo (or the cluster, while it starts) prints.
    if (target.standing_address.empty())
      std::printf("starting an embedded cluster of %zu hosts\n", target.hosts);
    else
      std::printf("attaching to the standing cluster at %s (TROUPE_ADDRESS)\n",
                  target.standing_address.c_str());
    std::fflush(stdout);
    ClusterOptions options =
        ClusterOptions::local(target.hosts, /*gpus_per_host=*/2, /*cpus_per_host=*/4);
    Cluster cluster(options);
    const std::vector<HostInfo> host_list = live_hosts(cluster);
    const size_t hosts = host_list.size();
    if (hosts == 0) throw Error(ErrorCode::kResourceUnavailable, "the cluster has no live host");
    if (target.standing_address.empty())
      std::printf("embedded cluster with %zu hosts up in %.1f ms (session %s)\n", hosts,
                  ms_since(t0), cluster.session_dir().c_str());
    else
      std::printf("standing cluster at %s with %zu hosts attached in %.1f ms (session %s)\n",
                  target.standing_address.c_str(), hosts, ms_since(t0),
                  cluster.session_dir().c_str());
    size_t min_gpus = host_list.front().gpu_ids.size();
    for (const auto& h : host_list) {
      min_gpus = std::min(min_gpus, h.gpu_ids.size());
      std::printf("  %s at %s: %.0f CPUs, %zu GPUs (declared), agent pid %d\n", h.name.c_str(),
                  h.address.c_str(), h.num_cpus, h.gpu_ids.size(), h.agent_pid);
    }
    // Two GPUs on every host: one per worker below; else the workers and bundles take none.
    const bool use_gpus = min_gpus >= 2;
    if (!use_gpus) std::printf("  (fewer than 2 GPUs on some host: the demo uses no GPUs)\n");

    t0 = std::chrono::steady_clock::now();
    std::vector<Worker> workers;
    for (size_t i = 0; i < 2 * hosts; ++i) {
      WorkerOptions o;
      o.class_name = "DemoWorker";
      o.args = {{"rank", static_cast<int>(i)}};
      o.host = host_list[i % hosts].index;
      o.name = "demo-" + std::to_string(i);
      o.num_gpus = use_gpus ? 1 : 0;
      workers.push_back(cluster.start_worker(o));
    }
    for (auto& w : workers) w.ready().get(std::chrono::seconds(30));
    std::printf("%zu workers started in %.1f ms\n", workers.size(), ms_since(t0));

    for (auto& w : workers)
      std::printf("  %s: %s\n", w.name().c_str(), w.call<std::string>("whoami").get().c_str());

    std::vector<Future<int64_t>> sums;
    for (auto& w : workers) sums.push_back(w.call<int64_t>("sum", {{"values", Array{1, 2, 3}}}));
    for (size_t i = 0; i < sums.size(); ++i)
      std::printf("  %s sum([1,2,3]) * (rank+1) = %lld\n", workers[i].name().c_str(),
                  static_cast<long long>(sums[i].get()));

    auto err = workers[0].call("no_such_method").raw();
    err.wait();
    std::printf("  an unknown method is a clear error: %s\n", err.error()->what());

    constexpr int kCalls = 2000;
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) workers[0].call<void>("noop").get();
    double sync_us = ms_since(t0) * 1000.0 / kCalls;
    t0 = std::chrono::steady_clock::now();
    std::vector<Future<void>> pending;
    pending.reserve(kCalls * workers.size());
    for (int i = 0; i < kCalls; ++i)
      for (auto& w : workers) pending.push_back(w.call<void>("noop"));
    wait_all(pending);
    double rate = pending.size() / (ms_since(t0) / 1000.0);
    std::printf("no-op call round trip: %.1f us; pipelined over %zu workers: %.0f calls/s\n",
                sync_us, workers.size(), rate);

    // A dp x tp worker group, tp = 2, one bundle per worker: dp = 2 over the first (at most 4)
    // hosts, spread as evenly as they go; dp = 1 on a single host (whose 2 GPUs hold 2 bundles).
    const size_t dp = hosts >= 2 ? 2 : 1;
    const size_t world = dp * 2;
    t0 = std::chrono::steady_clock::now();
    VirtualClusterOptions vco;
    const size_t bundle_hosts = std::min(hosts, world);
    for (size_t i = 0; i < bundle_hosts; ++i)
      vco.bundle_ct_per_node_list.push_back(world / bundle_hosts +
                                            (i < world % bundle_hosts ? 1 : 0));
    vco.use_gpus = use_gpus;
    vco.num_gpus_per_node = 2;
    if (!use_gpus) vco.cpus_per_bundle = 0.5;
    vco.max_colocated_worker_groups = 2;  // shares the GPUs with the workers above
    VirtualCluster vc(cluster, vco);
    WorkerGroupOptions wgo;
    wgo.name_prefix = "policy";
    wgo.sharding = NamedSharding::from_shape({"dp", "tp"}, {dp, 2});
    wgo.dp_leaders_from_axis = "dp";  // one DP leader per dp index (workers are untied)
    // The batch: one shard per dp index.
    Array batch{Array{1, 2, 3}};
    if (dp == 2) batch.push_back(Array{10, 20, 30});
    WorkerGroup group(vc, WorkerBuilder("DemoShard"), wgo);
    std::printf("worker group of %zu (dp=%zu x tp=2) up in %.1f ms\n", group.workers().size(),
                group.dp_size(), ms_since(t0));
    ShardedCallOptions sharded;
    sharded.in_sharded_axes = {"dp"};
    sharded.replicate_on_axes = {"tp"};
    sharded.common_kwargs = {{"step", "step-1"}};
    auto f = group.run_all_workers_sharded_data("shard", {{"batch", batch}}, sharded);
    std::printf("sharded call (batch split over dp, replicated over tp):\n");
    for (const auto& r : group.get_all_worker_results(f))
      std::printf("  %s\n", r.as_string().c_str());
    auto g = group.run_all_workers_single_data("replicated", {{"weights_version", "v7"}});
    std::printf("replicated call (same value to every worker, encoded once):\n");
    for (const auto& r : group.get_all_worker_results(g))
      std::printf("  %s\n", r.as_string().c_str());
    sharded.output_is_replicated = {"tp"};
    auto h = group.run_all_workers_sharded_data("shard", {{"batch", batch}}, sharded);
    std::printf("with output_is_replicated=[tp], one result per dp shard: %zu results\n",
                group.get_all_worker_results(h).size());
    if (hold_seconds > 0) {
      std::printf("holding the cluster for %d s (try `troupe status`)\n", hold_seconds);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(hold_seconds));
    }
    ShutdownReport report = group.shutdown();
    std::printf("worker group shut down %s\n", report.clean ? "cleanly" : "with problems:");
    for (const auto& p : report.problems) std::printf("  %s\n", p.c_str());
    vc.shutdown();

    t0 = std::chrono::steady_clock::now();
    cluster.shutdown();
    std::printf("shut down in %.1f ms; logs are in %s/logs\n", ms_since(t0),
                cluster.session_dir().c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe demo failed: %s\n", e.what());
    return 1;
  }
}

}  // namespace troupe::cli
