// A driver run by `troupe slurm` inside jobs of the local test cluster (tests/slurm/slurm.sh:
// nodes n1 at 127.0.0.11 and n2 at 127.0.0.12, 2 CPUs and 2 GPUs each), one test per job
// (troupe_slurm_test.sh picks it with --gtest_filter). Without TROUPE_ADDRESS every test is
// skipped: they only make sense under `troupe slurm`.
//
// What every test relies on (troupe slurm's contract, src/cli/slurm.h): host i is node i of the
// allocation (n1 is host 0, n2 host 1), each agent declares the CPUs and GPUs Slurm gave the job
// on its node and binds the node's NodeAddr.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "host_probe.h"
#include "troupe/troupe.h"

namespace {

using namespace std::chrono_literals;
using troupe::Array;
using troupe::Map;
using troupe::Value;

using troupe_test::getenv_of;

constexpr auto kDeadline = 30s;

class SlurmDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!getenv_of("TROUPE_ADDRESS")) GTEST_SKIP() << "run it under troupe slurm";
  }
};

troupe::VirtualClusterOptions bundles_per_node(size_t per_node, bool gpus) {
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = {per_node, per_node};
  o.use_gpus = gpus;
  o.num_gpus_per_node = static_cast<int>(per_node);
  o.max_retries = 1;
  o.retry_backoff = 10ms;
  return o;
}

troupe::WorkerGroupOptions group_options(const std::string& prefix,
                                         std::optional<troupe::NamedSharding> sharding = {}) {
  troupe::WorkerGroupOptions o;
  o.name_prefix = prefix;
  o.sharding = std::move(sharding);
  o.show_progress = false;
  o.start_timeout = kDeadline;
  return o;
}

std::vector<Value> env_of(troupe::WorkerGroup& g, const std::string& name) {
  auto f = g.run_all_workers_single_data("env", {{"name", name}});
  EXPECT_TRUE(f.wait_for(kDeadline));
  return g.get_all_worker_results(f);
}

// Job: sbatch -N2 --ntasks-per-node=1 -c2 --gres=gpu:2, so each node gives its agent 2 CPUs and
// GPUs 0 and 1. A 2 x 2 bundle cluster (one GPU each) and a dp=2 x tp=2 group: placement group
// i is host i, so ranks 0, 1 run on n1 and ranks 2, 3 on n2, in GPU order.
TEST_F(SlurmDriver, ShardedDispatchOnTwoNodes) {
  ASSERT_TRUE(getenv_of("SLURM_JOB_ID")) << "the driver runs inside the job";
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));  // redirected by TROUPE_ADDRESS
  auto hosts = cluster.hosts();
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].name, "n1");
  EXPECT_EQ(hosts[0].address, "127.0.0.11");
  EXPECT_EQ(hosts[1].name, "n2");
  EXPECT_EQ(hosts[1].address, "127.0.0.12");
  for (const auto& h : hosts) {
    EXPECT_TRUE(h.alive) << h.name;
    EXPECT_EQ(h.num_cpus, 2) << h.name;
    EXPECT_EQ(h.gpu_ids, (std::vector<int>{0, 1})) << h.name;
  }

  troupe::VirtualCluster vc(cluster, bundles_per_node(2, /*gpus=*/true));
  troupe::WorkerGroup group(
      vc, troupe::WorkerBuilder("HostProbe"),
      group_options("sl", troupe::NamedSharding::from_shape({"dp", "tp"}, {2, 2})));
  EXPECT_EQ(env_of(group, "RANK"), (std::vector<Value>{"0", "1", "2", "3"}));
  EXPECT_EQ(env_of(group, "WORLD_SIZE"), (std::vector<Value>{"4", "4", "4", "4"}));
  EXPECT_EQ(env_of(group, "NODE_RANK"), (std::vector<Value>{"0", "0", "1", "1"}));
  EXPECT_EQ(env_of(group, "CUDA_VISIBLE_DEVICES"), (std::vector<Value>{"0", "1", "0", "1"}));
  EXPECT_EQ(env_of(group, "MASTER_ADDR"),
            (std::vector<Value>{"127.0.0.11", "127.0.0.11", "127.0.0.11", "127.0.0.11"}));
  EXPECT_EQ(env_of(group, "TROUPE_HOST_NAME"), (std::vector<Value>{"n1", "n1", "n2", "n2"}));
  // Launcher variables and the token stay out of workers.
  for (const char* name : {"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURMD_NODENAME", "TROUPE_TOKEN"})
    EXPECT_EQ(env_of(group, name), (std::vector<Value>(4, Value()))) << name;

  // dp sharded, tp replicated: dp shard 0 goes to ranks 0, 1 and shard 1 to ranks 2, 3.
  troupe::ShardedCallOptions sharded;
  sharded.in_sharded_axes = {"dp"};
  sharded.replicate_on_axes = {"tp"};
  auto f = group.run_all_workers_sharded_data("echo", {{"x", Array{"s0", "s1"}}}, sharded);
  ASSERT_TRUE(f.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(f),
            (std::vector<Value>{Map{{"rank", 0}, {"x", "s0"}}, Map{{"rank", 1}, {"x", "s0"}},
                                Map{{"rank", 2}, {"x", "s1"}}, Map{{"rank", 3}, {"x", "s1"}}}));
  auto r = group.run_all_workers_single_data("rendezvous", {});
  ASSERT_TRUE(r.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(r), (std::vector<Value>{"ok", "ok", "ok", "ok"}));
}

// Starts a worker on each node, writes this driver's pid then the workers' to $PIDS_FILE (one per
// line), and waits to be cancelled (the script runs scancel and checks that nothing is left).
TEST_F(SlurmDriver, HoldUntilCancelled) {
  std::string path = getenv_of("PIDS_FILE").value_or("");
  ASSERT_FALSE(path.empty());
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  troupe::VirtualCluster vc(cluster, bundles_per_node(1, /*gpus=*/false));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("held"));
  std::string pids = std::to_string(::getpid()) + "\n";
  for (const auto& w : group.workers()) pids += std::to_string(w.pid()) + "\n";
  {
    std::ofstream out(path + ".tmp");
    out << pids;
  }
  ASSERT_EQ(std::rename((path + ".tmp").c_str(), path.c_str()), 0);
  std::this_thread::sleep_for(120s);  // until the job is cancelled
}

// Job: sbatch -N2 --gres=gpu:1, run twice at once. A group with one worker per node rendezvouses
// on MASTER_PORT; both jobs hold their ports at the same time: this one writes
// "MASTER_PORT CUDA_VISIBLE_DEVICES@n1 CUDA_VISIBLE_DEVICES@n2" to $PORT_FILE, then waits (at
// most 60 s) until the other job wrote $PEER_PORT_FILE before the rendezvous.
TEST_F(SlurmDriver, MasterPortRendezvous) {
  std::string mine = getenv_of("PORT_FILE").value_or(""),
              peer = getenv_of("PEER_PORT_FILE").value_or("");
  ASSERT_FALSE(mine.empty() || peer.empty()) << "set PORT_FILE and PEER_PORT_FILE";
  troupe::Cluster cluster(troupe::ClusterOptions::local(1));
  troupe::VirtualCluster vc(cluster, bundles_per_node(1, /*gpus=*/true));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("HostProbe"), group_options("mp"));
  auto port = env_of(group, "MASTER_PORT");
  auto cuda = env_of(group, "CUDA_VISIBLE_DEVICES");
  ASSERT_EQ(port.size(), 2u);
  EXPECT_EQ(port[0], port[1]);
  EXPECT_EQ(env_of(group, "TROUPE_HOST_NAME"), (std::vector<Value>{"n1", "n2"}));
  {
    std::ofstream out(mine + ".tmp");
    out << port[0].as_string() << " " << cuda[0].as_string() << " " << cuda[1].as_string() << "\n";
  }
  ASSERT_EQ(std::rename((mine + ".tmp").c_str(), mine.c_str()), 0);
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!std::filesystem::exists(peer) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(std::filesystem::exists(peer)) << "the other job never wrote " << peer;
  auto r = group.run_all_workers_single_data("rendezvous", {});
  ASSERT_TRUE(r.wait_for(kDeadline));
  EXPECT_EQ(group.get_all_worker_results(r), (std::vector<Value>{"ok", "ok"}));
}

}  // namespace
