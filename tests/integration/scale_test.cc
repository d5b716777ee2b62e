// One control plane at scale (issue 32 item 4, the CI-sized version of
// bench/control_plane_curve.cc): 2,000 real workers on 20 simulated hosts. Every worker is
// placed with its rank's environment, a no-op round and a sharded round come back whole, a
// SIGKILL of one worker per host is reported for each of them and for no other, shutdown reaps
// every process. Correctness only: the speed is the benchmark's. The driver starts with a soft
// descriptor limit of 512, under the 2,000 connections it needs: troupe raises it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace {

class ScaleProbe {
 public:
  // The placement variables this worker sees, and how many distinct ports its list names.
  troupe::Value placement() {
    auto get = [](const char* name) {
      const char* v = std::getenv(name);
      return std::string(v ? v : "(unset)");
    };
    std::string list = get("AVAILABLE_PORT_LIST");
    std::set<std::string> ports;
    std::stringstream in(list.substr(1, list.size() > 2 ? list.size() - 2 : 0));
    std::string item;
    while (std::getline(in, item, ',')) ports.insert(item.substr(item.find_first_not_of(' ')));
    return troupe::Map{{"rank", get("RANK")},
                       {"world", get("WORLD_SIZE")},
                       {"local_rank", get("LOCAL_RANK")},
                       {"node_rank", get("NODE_RANK")},
                       {"port_list", list},
                       {"distinct_ports", static_cast<int64_t>(ports.size())}};
  }
  int64_t echo_int(int64_t x) { return x; }
  void noop() {}
};

}  // namespace

TROUPE_WORKER_CLASS(ScaleProbe, cls) {
  cls.method("placement", &ScaleProbe::placement);
  cls.method("echo_int", &ScaleProbe::echo_int, {"x"});
  cls.method("noop", &ScaleProbe::noop);
}

namespace {

using namespace std::chrono_literals;
constexpr size_t kHosts = 20;
constexpr size_t kPerHost = 100;
constexpr size_t kWorkers = kHosts * kPerHost;

const troupe::Value& field(const troupe::Value& map, const char* key) {
  const troupe::Value* v = map.find(key);
  if (!v) throw std::runtime_error(std::string("no field ") + key);
  return *v;
}

TEST(Scale, TwoThousandWorkersOnTwentyHosts) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_GE(files.rlim_max, kWorkers + 1000) << "the hard descriptor limit is too low";
  files.rlim_cur = 512;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);

  troupe::ClusterOptions options = troupe::ClusterOptions::local(kHosts);
  options.log_to_driver = false;
  troupe::Cluster cluster(options);
  troupe::VirtualClusterOptions v;
  v.bundle_ct_per_node_list.assign(kHosts, kPerHost);
  v.use_gpus = false;
  v.cpus_per_bundle = 0.001;
  v.port_range_begin = 12000;  // a port per worker, shared by the simulated hosts
  v.port_range_end = 16000;
  troupe::VirtualCluster vc(cluster, v);
  troupe::WorkerGroupOptions g;
  g.name_prefix = "scale";
  g.show_progress = false;
  g.start_timeout = 300s;
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("ScaleProbe"), g);
  ASSERT_EQ(group.workers().size(), kWorkers);

  // Placement: rank r is bundle r % 100 of the placement group of node r / 100 (one per host,
  // in order); every worker has the same list of 2,000 distinct ports.
  auto placed = group.get_all_worker_results(group.run_all_workers_single_data("placement"));
  ASSERT_EQ(placed.size(), kWorkers);
  const std::string list = field(placed[0], "port_list").as_string();
  EXPECT_EQ(field(placed[0], "distinct_ports").as_int(), static_cast<int64_t>(kWorkers));
  for (size_t r = 0; r < kWorkers; ++r) {
    const troupe::Value& p = placed[r];
    ASSERT_EQ(field(p, "rank").as_string(), std::to_string(r));
    ASSERT_EQ(field(p, "world").as_string(), "2000") << "rank " << r;
    ASSERT_EQ(field(p, "local_rank").as_string(), std::to_string(r % kPerHost)) << "rank " << r;
    ASSERT_EQ(field(p, "node_rank").as_string(), std::to_string(r / kPerHost)) << "rank " << r;
    ASSERT_EQ(field(p, "port_list").as_string(), list) << "rank " << r;
  }

  // A sharded round: worker r gets shard r along dp and returns it.
  troupe::Array shards;
  for (size_t r = 0; r < kWorkers; ++r) shards.emplace_back(static_cast<int64_t>(r * 7));
  troupe::ShardedCallOptions sharding;
  sharding.in_sharded_axes = {"dp"};
  auto echoed = group.get_all_worker_results(
      group.run_all_workers_sharded_data("echo_int", {{"x", troupe::Value(shards)}}, sharding));
  ASSERT_EQ(echoed.size(), kWorkers);
  for (size_t r = 0; r < kWorkers; ++r) ASSERT_EQ(echoed[r].as_int(), static_cast<int64_t>(r * 7));

  // One worker per host killed: each death is reported, with the policy's decision, and no
  // other worker's; the others still answer.
  std::vector<troupe::Worker> workers = group.workers();
  std::set<size_t> killed;
  for (size_t h = 0; h < kHosts; ++h) killed.insert(h * kPerHost + h);
  for (size_t idx : killed) ASSERT_EQ(::kill(workers[idx].pid(), SIGKILL), 0);
  // The group's decisions are its signal that it noticed each death.
  auto reported = [&] {
    std::set<size_t> out;
    for (const auto& e : group.restart_events()) out.insert(e.worker_index);
    return out;
  };
  EXPECT_TRUE(eventually([&] { return reported().size() >= killed.size(); }, 60s));
  for (const auto& e : group.restart_events()) {
    EXPECT_TRUE(killed.count(e.worker_index)) << "worker " << e.worker_index << " reported dead";
    EXPECT_EQ(e.action, troupe::RestartEvent::Action::kPolicyOff);
  }
  EXPECT_EQ(reported(), killed);
  for (size_t idx : killed) EXPECT_FALSE(workers[idx].alive()) << "worker " << idx;
  for (size_t h = 0; h < kHosts; ++h)  // worker 50 of each host: none of the killed
    EXPECT_EQ(workers[h * kPerHost + 50].call<int64_t>("echo_int", {{"x", int64_t{5}}}).get(20s),
              5);

  // Shutdown: the killed workers are its only problems; every process is gone after.
  std::vector<std::pair<pid_t, std::optional<uint64_t>>> processes;  // pid, start time
  for (const auto& w : workers)
    processes.emplace_back(w.pid(), troupe::process::start_time(w.pid()));
  troupe::ShutdownReport report = group.shutdown();
  EXPECT_EQ(report.problems.size(), killed.size());
  for (const auto& problem : report.problems)
    EXPECT_NE(problem.find("was already dead"), std::string::npos) << problem;
  for (size_t i = 0; i < processes.size(); ++i) {
    auto [pid, started] = processes[i];
    if (killed.count(i)) continue;  // reaped before its start time was read
    EXPECT_TRUE(!troupe::process::start_time(pid) || troupe::process::start_time(pid) != started)
        << "worker " << i << " (pid " << pid << ") is left";
  }
}

}  // namespace
