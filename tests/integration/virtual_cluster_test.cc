// Integration tests of VirtualCluster with real agents: one placement group per node on its own
// host, GPU shares and colocation, all-or-nothing reservation with retries (VC-1), unified
// groups (STRICT_SPREAD, PACK) in topology order, ports new at each call (VC-2), and shutdown
// (VC-3). WorkerGroup construction is in worker_group_test.cc, dispatch in
// worker_group_dispatch_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "integration/group_classes.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::ErrorCode;
using troupe::PlacementStrategy;
using troupe::VirtualCluster;

std::vector<size_t> hosts_of(const troupe::PlacementGroup& pg) {
  std::vector<size_t> out;
  for (const auto& b : pg.bundles) out.push_back(b.host);
  return out;
}

std::vector<std::vector<int>> gpus_of(const troupe::PlacementGroup& pg) {
  std::vector<std::vector<int>> out;
  for (const auto& b : pg.bundles) out.push_back(b.gpu_ids);
  return out;
}

// 2 hosts with 2 declared GPUs and 4 CPUs each; host 0 is labelled topology=b, host 1
// topology=a, so a unified group orders host 1 first.
class VirtualClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto options = ClusterOptions::local(2, /*gpus_per_host=*/2, /*cpus_per_host=*/4);
    options.log_to_driver = false;
    options.hosts[0].labels = {{"topology", "b"}};
    options.hosts[1].labels = {{"topology", "a"}};
    cluster_ = new Cluster(options);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static Cluster* cluster_;
};
Cluster* VirtualClusterTest::cluster_ = nullptr;

TEST_F(VirtualClusterTest, OnePlacementGroupPerNodeEachOnItsOwnHost) {
  VirtualCluster vc(*cluster_, vc_options({2, 2}));
  const auto& pgs = vc.get_placement_groups();
  ASSERT_EQ(pgs.size(), 2u);
  EXPECT_EQ(vc.world_size(), 4u);
  EXPECT_EQ(vc.node_count(), 2u);
  for (size_t pg = 0; pg < 2; ++pg) {
    EXPECT_EQ(pgs[pg].strategy, PlacementStrategy::kStrictPack);
    EXPECT_EQ(hosts_of(pgs[pg]), (std::vector<size_t>{pg, pg}));
    EXPECT_EQ(gpus_of(pgs[pg]), (std::vector<std::vector<int>>{{0}, {1}}));
    for (const auto& b : pgs[pg].bundles) {
      EXPECT_EQ(b.address, "127.0.0." + std::to_string(pg + 2));
      EXPECT_EQ(b.host_name, "host-" + std::to_string(pg));
      EXPECT_DOUBLE_EQ(b.num_gpus, 1.0);
    }
  }
  EXPECT_NE(pgs[0].id, pgs[1].id);
}

TEST_F(VirtualClusterTest, MaxColocatedWorkerGroupsLetsTwoClustersShareGpus) {
  VirtualCluster a(*cluster_, vc_options({2, 2}, /*colocated=*/2));
  VirtualCluster b(*cluster_, vc_options({2, 2}, /*colocated=*/2));
  for (const VirtualCluster* vc : {&a, &b}) {
    const auto& pgs = vc->get_placement_groups();
    ASSERT_EQ(pgs.size(), 2u);
    for (size_t pg = 0; pg < 2; ++pg) {
      EXPECT_EQ(hosts_of(pgs[pg]), (std::vector<size_t>{pg, pg}));
      EXPECT_EQ(gpus_of(pgs[pg]), (std::vector<std::vector<int>>{{0}, {1}}));
      for (const auto& bundle : pgs[pg].bundles) EXPECT_DOUBLE_EQ(bundle.num_gpus, 0.5);
    }
  }
}

// VC-1: a request that does not fit throws after the retries, saying what was asked and what
// exists, and keeps nothing: the first group, which did fit, is released again.
TEST_F(VirtualClusterTest, RequestThatDoesNotFitThrowsAndReservesNothing) {
  std::string msg = error_of(
      [&] {
        VirtualCluster vc(*cluster_, vc_options({2, 3}));
      },
      ErrorCode::kResourceUnavailable);
  EXPECT_HAS(msg, "could not be placed after 2 attempts");
  EXPECT_HAS(msg, "asks for 3 bundles of {CPU 1, GPU 1} with STRICT_PACK");
  EXPECT_HAS(msg, "host-0 free {CPU");
  EXPECT_HAS(msg, "host-1 free {CPU");

  VirtualCluster vc(*cluster_, vc_options({2, 2}));  // every GPU: nothing was left reserved
  EXPECT_EQ(vc.world_size(), 4u);
}

TEST_F(VirtualClusterTest, BadOptionsAreInvalidArguments) {
  auto o = vc_options({3});
  o.num_gpus_per_node = 2;
  EXPECT_HAS(error_of([&] { VirtualCluster vc(*cluster_, o); }, ErrorCode::kInvalidArgument),
             "node 0 asks for 3 GPU bundles but num_gpus_per_node is 2");
  EXPECT_HAS(
      error_of([&] { VirtualCluster vc(*cluster_, vc_options({})); }, ErrorCode::kInvalidArgument),
      "bundle_ct_per_node_list is empty");
}

TEST_F(VirtualClusterTest, UnifiedGroupStrictSpreadOrderedByTopology) {
  auto o = vc_options({1, 1});
  o.use_unified_placement_group = true;
  o.placement_strategy = PlacementStrategy::kStrictSpread;
  VirtualCluster vc(*cluster_, o);
  const auto& pgs = vc.get_placement_groups();
  ASSERT_EQ(pgs.size(), 1u);
  EXPECT_EQ(pgs[0].strategy, PlacementStrategy::kStrictSpread);
  // Host 1 carries topology=a, host 0 topology=b: host 1 comes first.
  EXPECT_EQ(hosts_of(pgs[0]), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(vc.world_size(), 2u);
  EXPECT_EQ(vc.node_count(), 2u);

  auto three = vc_options({3});
  three.use_unified_placement_group = true;
  three.placement_strategy = PlacementStrategy::kStrictSpread;
  EXPECT_HAS(
      error_of([&] { VirtualCluster vc3(*cluster_, three); }, ErrorCode::kResourceUnavailable),
      "needs 3 distinct hosts with room, found 2");
}

TEST_F(VirtualClusterTest, UnifiedGroupPackOrderedByTopologyThenGpu) {
  auto o = vc_options({2, 2});
  o.use_unified_placement_group = true;
  o.placement_strategy = PlacementStrategy::kPack;
  VirtualCluster vc(*cluster_, o);
  const auto& pgs = vc.get_placement_groups();
  ASSERT_EQ(pgs.size(), 1u);
  EXPECT_EQ(pgs[0].strategy, PlacementStrategy::kPack);
  EXPECT_EQ(hosts_of(pgs[0]), (std::vector<size_t>{1, 1, 0, 0}));
  EXPECT_EQ(gpus_of(pgs[0]), (std::vector<std::vector<int>>{{0}, {1}, {0}, {1}}));
  EXPECT_EQ(pgs[0].bundles[0].address, "127.0.0.3");
  EXPECT_EQ(vc.node_count(), 2u);
}

// VC-2: a new port at each call, in the default range, on the first bundle's host.
TEST_F(VirtualClusterTest, MasterPortIsNewAtEachCall) {
  VirtualCluster vc(*cluster_, vc_options({2, 2}));
  std::set<int> ports;
  for (int i = 0; i < 5; ++i) {
    auto m = vc.get_master_address_and_port();
    EXPECT_EQ(m.address, "127.0.0.2");
    EXPECT_GE(m.port, troupe::VirtualClusterOptions{}.port_range_begin);
    EXPECT_LT(m.port, troupe::VirtualClusterOptions{}.port_range_end);
    EXPECT_TRUE(ports.insert(m.port).second) << "port " << m.port << " handed out twice";
  }

  auto batch = vc.get_available_addresses_and_ports_batch({{0, 0}, {0, 1}, {1, 0}, {1, 1}});
  ASSERT_EQ(batch.size(), 4u);
  EXPECT_EQ(batch[0].address, "127.0.0.2");
  EXPECT_EQ(batch[1].address, "127.0.0.2");
  EXPECT_EQ(batch[2].address, "127.0.0.3");
  EXPECT_EQ(batch[3].address, "127.0.0.3");
  for (const auto& a : batch) {
    EXPECT_GE(a.port, troupe::VirtualClusterOptions{}.port_range_begin);
    EXPECT_LT(a.port, troupe::VirtualClusterOptions{}.port_range_end);
  }
  // Ports on host 0 are new (the master ports were on host 0 too); host 1's are distinct.
  EXPECT_TRUE(ports.insert(batch[0].port).second);
  EXPECT_TRUE(ports.insert(batch[1].port).second);
  EXPECT_NE(batch[2].port, batch[3].port);

  EXPECT_HAS(error_of(
                 [&] {
                   vc.get_available_addresses_and_ports_batch({{2, 0}});
                 },
                 ErrorCode::kInvalidArgument),
             "bundle (2, 0) is out of range: the cluster has 2 placement groups");
  EXPECT_HAS(error_of(
                 [&] {
                   vc.get_available_addresses_and_ports_batch({{0, 0}, {1, 2}});
                 },
                 ErrorCode::kInvalidArgument),
             "group 1 has 2 bundles");
}

// VC-3: shutdown is idempotent and frees the GPUs and the ports.
TEST_F(VirtualClusterTest, ShutdownIsIdempotentAndFreesGpusAndPorts) {
  auto o = vc_options({2, 2});
  o.port_range_begin = 1990;
  o.port_range_end = 1992;  // two ports per host
  auto vc = std::make_unique<VirtualCluster>(*cluster_, o);
  std::set<int> first = {vc->get_master_address_and_port().port,
                         vc->get_master_address_and_port().port};
  EXPECT_EQ(first, (std::set<int>{1990, 1991}));
  EXPECT_HAS(error_of([&] { vc->get_master_address_and_port(); }, ErrorCode::kResourceUnavailable),
             "only 0 of 1 ports free in [1990, 1992)");

  vc->shutdown();
  EXPECT_TRUE(vc->is_shut_down());
  EXPECT_TRUE(vc->get_placement_groups().empty());
  vc->shutdown();  // idempotent
  EXPECT_TRUE(vc->is_shut_down());
  EXPECT_EQ(error_of([&] { vc->get_master_address_and_port(); }, ErrorCode::kShutdown).empty(),
            false);

  // Every GPU and both ports are free again.
  VirtualCluster again(*cluster_, o);
  EXPECT_EQ(again.world_size(), 4u);
  std::set<int> second = {again.get_master_address_and_port().port,
                          again.get_master_address_and_port().port};
  EXPECT_EQ(second, (std::set<int>{1990, 1991}));
  vc.reset();  // destroying the shut-down cluster releases nothing of the new one
  EXPECT_EQ(again.get_placement_groups().size(), 2u);
  error_of([&] { again.get_master_address_and_port(); }, ErrorCode::kResourceUnavailable);
}

}  // namespace
}  // namespace troupe_test
