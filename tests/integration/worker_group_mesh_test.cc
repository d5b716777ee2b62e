// Dispatch on a 3-axis mesh of 8 real worker processes, with every expected value worked out by
// hand from the reference design's rules:
//   - an axis in in_sharded_axes selects the worker's slice (data nested in that axis order);
//   - an axis in replicate_on_axes gives every index the same data;
//   - a free axis (in neither) calls only its index 0 (others get nil with
//     make_dummy_calls_to_free_axes) and returns only from its index 0;
//   - output_is_replicated returns only from index 0 of those axes.
//
// The mesh: NamedSharding::from_shape({"pp", "dp", "tp"}, {2, 2, 2}), so rank = 4 pp + 2 dp + tp:
//   0=(0,0,0) 1=(0,0,1) 2=(0,1,0) 3=(0,1,1) 4=(1,0,0) 5=(1,0,1) 6=(1,1,0) 7=(1,1,1).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "integration/group_classes.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;
using troupe::Array;
using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::MultiWorkerFuture;
using troupe::NamedSharding;
using troupe::Value;
using troupe::VirtualCluster;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;
using troupe::WorkerGroupOptions;

constexpr auto kMeshDeadline = 30s;
using Workers = std::vector<size_t>;
using Values = std::vector<Value>;

class MeshTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto options = ClusterOptions::local(2, /*gpus_per_host=*/4, /*cpus_per_host=*/4);
    options.log_to_driver = false;
    cluster_ = new Cluster(options);
    auto vo = vc_options({4, 4});
    vo.num_gpus_per_node = 4;
    vc_ = new VirtualCluster(*cluster_, vo);
    WorkerGroupOptions o;
    o.name_prefix = "mesh";
    o.sharding = NamedSharding::from_shape({"pp", "dp", "tp"}, {2, 2, 2});
    o.show_progress = false;
    o.start_timeout = kMeshDeadline;
    group_ = new WorkerGroup(*vc_, WorkerBuilder("GroupProbe"), o);
  }
  static void TearDownTestSuite() {
    delete group_;
    delete vc_;
    delete cluster_;
    group_ = nullptr;
    vc_ = nullptr;
    cluster_ = nullptr;
  }
  static Values results(const MultiWorkerFuture& f) {
    EXPECT_TRUE(f.wait_for(kMeshDeadline)) << "the calls did not complete in time";
    return group_->get_all_worker_results(f);
  }
  static Cluster* cluster_;
  static VirtualCluster* vc_;
  static WorkerGroup* group_;
};
Cluster* MeshTest::cluster_ = nullptr;
VirtualCluster* MeshTest::vc_ = nullptr;
WorkerGroup* MeshTest::group_ = nullptr;

// dp sharded, tp replicated with its output replicated, pp free.
TEST_F(MeshTest, PpFreeDpShardedTpReplicated) {
  const Value x = Array{"d0", "d1"};
  auto f =
      group_->run_all_workers_sharded_data("echo", {{"x", x}}, sharded({"dp"}, {"tp"}, {"tp"}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));  // pp = 0
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));   // pp = 0 and tp = 0
  EXPECT_EQ(results(f), (Values{echoed(0, "d0"), echoed(2, "d1")}));
  EXPECT_EQ(f.futures()[1].get(kMeshDeadline), echoed(1, "d0"));
  EXPECT_EQ(f.futures()[3].get(kMeshDeadline), echoed(3, "d1"));

  // With dummy calls, pp = 1 (workers 4..7) is called with nil and still not returned from.
  f = group_->run_all_workers_sharded_data("echo", {{"x", x}},
                                           sharded({"dp"}, {"tp"}, {"tp"}, true));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, "d0"), echoed(2, "d1")}));
  for (size_t w = 4; w < 8; ++w)
    EXPECT_EQ(f.futures()[w].get(kMeshDeadline), echoed(static_cast<int>(w), Value())) << w;
}

// pp and tp sharded (data[pp][tp]), dp free: workers with dp = 0.
TEST_F(MeshTest, DpFreePpAndTpSharded) {
  const Value x = Array{Array{"p0t0", "p0t1"}, Array{"p1t0", "p1t1"}};
  auto f = group_->run_all_workers_sharded_data("echo", {{"x", x}}, sharded({"pp", "tp"}, {}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 4, 5}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1, 4, 5}));
  EXPECT_EQ(results(f),
            (Values{echoed(0, "p0t0"), echoed(1, "p0t1"), echoed(4, "p1t0"), echoed(5, "p1t1")}));
}

// tp then pp sharded (data[tp][pp]), dp replicated with its output replicated: everyone is
// called, workers with dp = 0 are returned from.
TEST_F(MeshTest, ShardedInGivenAxisOrderReplicatedOnDp) {
  const Value x = Array{Array{"t0p0", "t0p1"}, Array{"t1p0", "t1p1"}};
  auto f = group_->run_all_workers_sharded_data("echo", {{"x", x}},
                                                sharded({"tp", "pp"}, {"dp"}, {"dp"}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1, 4, 5}));
  EXPECT_EQ(results(f),
            (Values{echoed(0, "t0p0"), echoed(1, "t1p0"), echoed(4, "t0p1"), echoed(5, "t1p1")}));
  const char* all[] = {"t0p0", "t1p0", "t0p0", "t1p0", "t0p1", "t1p1", "t0p1", "t1p1"};
  for (size_t w = 0; w < 8; ++w)
    EXPECT_EQ(f.futures()[w].get(kMeshDeadline), echoed(static_cast<int>(w), all[w])) << w;
}

// Replicated everywhere, output replicated everywhere: 8 calls, one result (worker 0).
TEST_F(MeshTest, FullyReplicatedReturnsOnce) {
  auto f = group_->run_all_workers_sharded_data(
      "echo", {{"x", "w"}}, sharded({}, {"pp", "dp", "tp"}, {"pp", "dp", "tp"}));
  EXPECT_EQ(f.called_workers().size(), 8u);
  EXPECT_EQ(f.return_from_workers(), (Workers{0}));
  EXPECT_EQ(results(f), (Values{echoed(0, "w")}));
}

TEST_F(MeshTest, RankZeroOnlyAxes) {
  // Index 0 of pp and tp: workers 0 and 2.
  auto f = group_->run_all_workers_single_data("echo", {{"x", 1}}, {"pp", "tp"});
  EXPECT_EQ(f.called_workers(), (Workers{0, 2}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 2}));
  EXPECT_EQ(results(f), (Values{echoed(0, 1), echoed(2, 1)}));

  // Index 0 of dp: workers 0, 1, 4, 5, one list element each, in worker order.
  f = group_->run_all_workers_multiple_data("echo", {{"x", Array{"a", "b", "c", "d"}}}, {"dp"});
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 4, 5}));
  EXPECT_EQ(results(f), (Values{echoed(0, "a"), echoed(1, "b"), echoed(4, "c"), echoed(5, "d")}));
}

// Slicing: group.slice({pp: 1}) is workers 4..7 as a dp x tp mesh of their own (slice indices
// 0..3); slicing it again on tp = 1 leaves workers 5 and 7 on a dp axis.
TEST_F(MeshTest, SlicesAreMeshesOfTheirOwn) {
  troupe::WorkerGroupSlice s = group_->slice({{"pp", 1}});
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.group_worker_indices(), (Workers{4, 5, 6, 7}));
  EXPECT_EQ(s.sharding(), NamedSharding::from_shape({"dp", "tp"}, {2, 2}));
  EXPECT_EQ(s.worker(2).name(), group_->worker(6).name());

  auto f =
      s.run_all_workers_sharded_data("echo", {{"x", Array{"a", "b"}}}, sharded({"dp"}, {"tp"}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(f.return_from_workers(), (Workers{0, 1, 2, 3}));
  EXPECT_EQ(s.get_all_worker_results(f),
            (Values{echoed(4, "a"), echoed(5, "a"), echoed(6, "b"), echoed(7, "b")}));

  // tp free on the slice: slice workers 0 and 2 (group workers 4 and 6).
  f = s.run_all_workers_sharded_data("echo", {{"x", Array{"a", "b"}}}, sharded({"dp"}, {}));
  EXPECT_EQ(f.called_workers(), (Workers{0, 2}));
  EXPECT_EQ(s.get_all_worker_results(f), (Values{echoed(4, "a"), echoed(6, "b")}));

  troupe::WorkerGroupSlice t = s.slice({{"tp", 1}});
  EXPECT_EQ(t.group_worker_indices(), (Workers{5, 7}));
  EXPECT_EQ(t.sharding(), NamedSharding::from_shape({"dp"}, {2}));
  f = t.run_all_workers_single_data("echo", {{"x", 3}});
  EXPECT_EQ(f.called_workers(), (Workers{0, 1}));
  EXPECT_EQ(t.get_all_worker_results(f), (Values{echoed(5, 3), echoed(7, 3)}));
  f = t.run_all_workers_multiple_data("echo", {{"x", Array{"p", "q"}}});
  EXPECT_EQ(t.get_all_worker_results(f), (Values{echoed(5, "p"), echoed(7, "q")}));

  // Every axis fixed: one worker.
  troupe::WorkerGroupSlice one = group_->slice({{"pp", 0}, {"dp", 1}, {"tp", 1}});
  EXPECT_EQ(one.group_worker_indices(), (Workers{3}));
  EXPECT_EQ(one.sharding().size(), 1u);
  EXPECT_EQ(one.run_single_worker_single_data("echo", 0, {{"x", 9}}).get(kMeshDeadline),
            echoed(3, 9));

  using troupe::ErrorCode;
  EXPECT_HAS(error_of([&] { group_->slice({{"xx", 0}}); }, ErrorCode::kInvalidArgument), "xx");
  EXPECT_HAS(error_of(
                 [&] {
                   s.slice({{"dp", 2}});
                 },
                 ErrorCode::kInvalidArgument),
             "index 2 out of range for axis 'dp' of size 2");
  EXPECT_HAS(error_of([&] { s.worker(4); }, ErrorCode::kInvalidArgument),
             "worker index 4 is out of range: slice of group 'mesh' has 4 workers");
  EXPECT_HAS(error_of(
                 [&] {
                   t.run_all_workers_single_data("echo", {{"x", 1}}, {"tp"});
                 },
                 ErrorCode::kInvalidArgument),
             "run_rank_0_only_axes: axis 'tp' is not in the sharding (axes: dp)");
}

}  // namespace
}  // namespace troupe_test
