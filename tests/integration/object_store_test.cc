// Integration tests of the object store (src/store, controller/object_store.h) on an embedded
// cluster of two simulated hosts (real agents and workers on this machine, which share the
// driver's /dev/shm): a large argument reaches every worker mapped from one store object in
// every dispatch mode, an ObjectRef serves many calls, and a large result comes back through
// the store. Lifetime, capacity and cleanup: object_store_fault_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "integration/group_classes.h"
#include "integration/store_classes.h"
#include "troupe/troupe.h"

namespace troupe_test {
namespace {

using namespace std::chrono_literals;
using troupe::Array;
using troupe::Bytes;
using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::MultiWorkerFuture;
using troupe::NamedSharding;
using troupe::ObjectRef;
using troupe::Value;
using troupe::VirtualCluster;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;
using troupe::WorkerGroupOptions;

constexpr auto kDeadline = 60s;
constexpr size_t kMiB = size_t{1} << 20;

class ObjectStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto options = ClusterOptions::local(2, /*gpus_per_host=*/2, /*cpus_per_host=*/4);
    options.log_to_driver = false;
    cluster_ = new Cluster(options);
    vc_ = new VirtualCluster(*cluster_, vc_options({2, 2}));
    WorkerGroupOptions o;
    o.name_prefix = "store";
    o.sharding = NamedSharding::from_shape({"dp", "tp"}, {2, 2});
    o.show_progress = false;
    o.start_timeout = kDeadline;
    group_ = new WorkerGroup(*vc_, WorkerBuilder("StoreProbe"), o);
  }
  static void TearDownTestSuite() {
    delete group_;
    delete vc_;
    delete cluster_;
  }
  void TearDown() override {
    // Every test drops its objects: the agent's account and the files go back to nothing.
    EXPECT_TRUE(store_objects_become(*cluster_, 0, 0, 20s)) << "objects left after the test";
    EXPECT_TRUE(eventually([] { return store_files_of(agent_pid(*cluster_, 0)).empty(); }, 20s));
  }

  // Each result of `f` is the checksum of `expected[i]`, read from a store mapping.
  static void expect_checksums(const MultiWorkerFuture& f, const std::vector<Bytes>& expected) {
    ASSERT_TRUE(f.wait_for(kDeadline));
    auto results = group_->get_all_worker_results(f);
    ASSERT_EQ(results.size(), expected.size());
    for (size_t i = 0; i < results.size(); ++i) {
      const Value& r = results[i];
      EXPECT_EQ(r.find("sum")->as_int(), checksum_of(expected[i])) << "worker " << i;
      EXPECT_EQ(r.find("size")->as_int(), static_cast<int64_t>(expected[i].size()));
      EXPECT_HAS(r.find("backing")->as_string(), "/dev/shm/troupe-");
    }
  }

  static Cluster* cluster_;
  static VirtualCluster* vc_;
  static WorkerGroup* group_;
};
Cluster* ObjectStoreTest::cluster_ = nullptr;
VirtualCluster* ObjectStoreTest::vc_ = nullptr;
WorkerGroup* ObjectStoreTest::group_ = nullptr;

// 64 MiB to all 4 workers (2 per host): one store object, mapped by each.
TEST_F(ObjectStoreTest, LargeArgumentReplicatedToAllWorkers) {
  const Bytes big = pattern(64 * kMiB, 1);
  auto f = group_->run_all_workers_single_data("checksum", {{"data", big}});
  expect_checksums(f, {big, big, big, big});
}

TEST_F(ObjectStoreTest, ObjectRefReplicatedToAllWorkers) {
  const Bytes big = pattern(64 * kMiB, 2);
  ObjectRef ref = cluster_->put(big);
  EXPECT_FALSE(ref.name().empty());
  EXPECT_TRUE(store_file_exists(ref.name()));
  EXPECT_EQ(cluster_->object_store_usage(0).objects, 1);
  EXPECT_EQ(cluster_->object_store_usage(0).bytes, static_cast<int64_t>(64 * kMiB));
  expect_checksums(group_->run_all_workers_single_data("checksum", {{"data", ref}}),
                   {big, big, big, big});
  // The same ref again, and to one worker: still the one object.
  expect_checksums(group_->run_all_workers_single_data("checksum", {{"data", ref}}),
                   {big, big, big, big});
  auto one = group_->worker(3).call("checksum", {{"data", ref}}).get(kDeadline);
  EXPECT_EQ(one.find("sum")->as_int(), checksum_of(big));
  EXPECT_EQ(cluster_->object_store_usage(0).objects, 1);
  const std::string name = ref.name();
  ref = ObjectRef();  // dropped, no call in flight: freed
  EXPECT_TRUE(store_objects_become(*cluster_, 0, 0, 20s));
  EXPECT_FALSE(store_file_exists(name));
}

// multiple_data with one ObjectRef per worker.
TEST_F(ObjectStoreTest, MultipleDataOneRefPerWorker) {
  std::vector<Bytes> data;
  Array refs;
  std::vector<ObjectRef> held;
  for (uint64_t i = 0; i < 4; ++i) {
    data.push_back(pattern(16 * kMiB, 10 + i));
    held.push_back(cluster_->put(data.back()));
    refs.push_back(held.back());
  }
  EXPECT_EQ(cluster_->object_store_usage(0).objects, 4);
  expect_checksums(group_->run_all_workers_multiple_data("checksum", {{"data", refs}}), data);
  held.clear();
  refs.clear();
}

// dp sharded, tp replicated: workers 0 and 1 get slice 0, workers 2 and 3 slice 1 (each over the
// threshold, so through the store).
TEST_F(ObjectStoreTest, ShardedData) {
  const Bytes a = pattern(8 * kMiB, 20), b = pattern(8 * kMiB, 21);
  auto f = group_->run_all_workers_sharded_data("checksum", {{"data", Array{a, b}}},
                                                sharded({"dp"}, {"tp"}, {}, false));
  expect_checksums(f, {a, a, b, b});
}

// Below the threshold a Bytes travels as an attachment (heap memory on the worker's side).
TEST_F(ObjectStoreTest, SmallArgumentIsNotStored) {
  const Bytes small = pattern(64 * 1024, 3);
  auto r = group_->worker(0).call("checksum", {{"data", small}}).get(kDeadline);
  EXPECT_EQ(r.find("sum")->as_int(), checksum_of(small));
  EXPECT_EQ(r.find("backing")->as_string().find("/dev/shm/troupe-"), std::string::npos);
}

// A large result of a worker on the driver's host comes back through the store, intact, and
// the driver removes the result's file as soon as it has mapped it.
TEST_F(ObjectStoreTest, LargeResultThroughTheStore) {
  for (size_t w : {size_t{0}, size_t{3}}) {
    Bytes r = group_->worker(w)
                  .call<Bytes>("make", {{"size", int64_t(32 * kMiB)}, {"seed", 5}})
                  .get(kDeadline);
    EXPECT_EQ(r.size(), 32 * kMiB);
    EXPECT_EQ(checksum_of(r), checksum_of(pattern(32 * kMiB, 5)));
    for (size_t h : {size_t{0}, size_t{1}})
      EXPECT_TRUE(store_files_of(agent_pid(*cluster_, h)).empty()) << "result file left";
  }
}

}  // namespace
}  // namespace troupe_test
