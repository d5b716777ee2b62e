// Two drivers of one real standing cluster (`troupe start --head` and one agent with 2 GPUs on
// loopback, --block, children of the test) compete for its GPUs through the head's one book:
// - the second driver's virtual cluster that waits for resources is listed by `troupe status`
//   as waiting, with the reason, and is placed on the GPUs once the first driver releases them;
// - a driver's exit frees its bookings for the other; what a driver asks after a shutdown (whose
//   releases it does not await) is served after them;
// - a waiting driver waits on through a kill -9 and restart of the head, which books again from
//   its journal what was booked, and releases what no driver books again within its grace;
// - without wait_for_resources, a virtual cluster that does not fit fails at once, and one that
//   waits gives up at its creation_timeout, saying so.
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "test_util.h"
#include "troupe/resources.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::VirtualCluster;
using troupe::VirtualClusterOptions;
using namespace std::chrono_literals;

class SharedBook : public testing::Test {
 protected:
  SharedBook() {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", "shared-book-test-token");
    if (!cluster_.start_head()) return;
    envs_.set("TROUPE_ADDRESS", cluster_.address());
    cluster_.start_agents({{"book-a", "127.0.0.53", "2", "2"}});
  }
  static ClusterOptions driver() {
    ClusterOptions o;  // TROUPE_ADDRESS: the standing head
    o.log_to_driver = false;
    return o;
  }
  // Both GPUs of the host, as one per-node group of 2 bundles.
  static VirtualClusterOptions both_gpus(const std::string& name, bool wait) {
    VirtualClusterOptions o;
    o.name = name;
    o.bundle_ct_per_node_list = {2};
    o.use_gpus = true;
    o.num_gpus_per_node = 2;
    o.cpus_per_bundle = 0.5;
    o.max_retries = 0;
    o.wait_for_resources = wait;
    o.creation_timeout = wait ? kDeadline : 1000ms;
    return o;
  }
  static std::vector<int> gpus_of(const VirtualCluster& vc) {
    std::vector<int> out;
    for (const auto& b : vc.get_placement_groups().at(0).bundles)
      out.insert(out.end(), b.gpu_ids.begin(), b.gpu_ids.end());
    return out;
  }
  // `troupe status` once its "waiting for resources" section names `what`; "" when it does not
  // within the deadline.
  std::string status_once_waiting(const std::string& what) {
    std::string out;
    bool seen = eventually(
        [&] {
          out = cluster_.status().output;
          auto at = out.find("waiting for resources:");
          return at != std::string::npos && out.find(what, at) != std::string::npos;
        },
        kDeadline);
    return seen ? out : "";
  }

  TempDir dir_;
  ScopedEnvs envs_;
  StandingCluster cluster_{TROUPE_CLI_PATH, dir_.path()};
};

TEST_F(SharedBook, SecondDriverWaitsForTheFirstsGpusThenGetsThem) {
  Cluster first(driver()), second(driver());
  auto held = std::make_unique<VirtualCluster>(first, both_gpus("first", false));
  EXPECT_EQ(gpus_of(*held), (std::vector<int>{0, 1}));

  // Not waiting: it fails at once, naming what it asked for and what is free.
  try {
    VirtualCluster at_once(second, both_gpus("at-once", false));
    ADD_FAILURE() << "the first driver's GPUs were booked twice";
  } catch (const troupe::Error& e) {
    EXPECT_EQ(e.code(), troupe::ErrorCode::kResourceUnavailable);
    EXPECT_HAS(e.message(), "GPU 0/2");
  }

  auto waiter = std::async(std::launch::async, [&] {
    return std::make_unique<VirtualCluster>(second, both_gpus("second", true));
  });
  std::string status = status_once_waiting("virtual cluster second");
  ASSERT_FALSE(status.empty()) << cluster_.status().output;
  EXPECT_HAS(status, "GPU 0/2");  // the reason: book-a has no GPU free
  EXPECT_EQ(waiter.wait_for(0ms), std::future_status::timeout);

  held->shutdown();  // the first driver releases its GPUs
  ASSERT_EQ(waiter.wait_for(kDeadline), std::future_status::ready) << "the waiter never got them";
  auto placed = waiter.get();
  EXPECT_EQ(gpus_of(*placed), (std::vector<int>{0, 1}));
  EXPECT_EQ(cluster_.status().output.find("waiting for resources:"), std::string::npos);
}

// shutdown() does not wait for the head's answer to its releases, but what the driver asks next
// is served after them: the GPUs are free at once for it.
TEST_F(SharedBook, WhatADriverAsksAfterAShutdownIsServedAfterItsReleases) {
  Cluster c(driver());
  for (int i = 0; i < 20; ++i) {
    VirtualCluster vc(c, both_gpus("again-" + std::to_string(i), false));  // fails if not free
    EXPECT_EQ(gpus_of(vc), (std::vector<int>{0, 1}));
    vc.shutdown();
    auto host = troupe::host_resources(c).at(0);
    EXPECT_EQ(host.gpus_free, (std::vector<double>{1, 1})) << "after shutdown " << i;
  }
}

TEST_F(SharedBook, ADriversExitFreesItsGpusForTheWaitingOne) {
  auto first = std::make_unique<Cluster>(driver());
  VirtualCluster held(*first, both_gpus("first", false));
  Cluster second(driver());
  auto waiter = std::async(std::launch::async, [&] {
    return std::make_unique<VirtualCluster>(second, both_gpus("second", true));
  });
  ASSERT_FALSE(status_once_waiting("virtual cluster second").empty());
  first->shutdown();  // the driver leaves without releasing: the head frees its bookings
  ASSERT_EQ(waiter.wait_for(kDeadline), std::future_status::ready) << "the waiter never got them";
  EXPECT_EQ(gpus_of(*waiter.get()), (std::vector<int>{0, 1}));
}

// kill -9 of the head while one driver holds the GPUs and another waits for them: the holder
// books them again on the restarted head, the waiter waits there again (listed anew), and gets
// them once the holder releases them; nothing is booked twice.
TEST_F(SharedBook, AWaitingDriverWaitsOnThroughAHeadRestart) {
  Cluster first(driver()), second(driver());
  auto held = std::make_unique<VirtualCluster>(first, both_gpus("first", false));
  auto waiter = std::async(std::launch::async, [&] {
    return std::make_unique<VirtualCluster>(second, both_gpus("second", true));
  });
  ASSERT_FALSE(status_once_waiting("virtual cluster second").empty());

  ASSERT_TRUE(cluster_.kill_and_restart_head());
  // The new head knows nothing until its agents and drivers are back: the holder's group is
  // booked again where it was, and the waiter waits there again.
  std::string status;
  ASSERT_TRUE(eventually(
      [&] {
        status = cluster_.status().output;
        return status.find("book-a: 2 bundles (GPUs 0 1)") != std::string::npos &&
               status.find("virtual cluster second") != std::string::npos;
      },
      kDeadline))
      << status;
  EXPECT_EQ(waiter.wait_for(0ms), std::future_status::timeout);

  held->shutdown();
  ASSERT_EQ(waiter.wait_for(kDeadline), std::future_status::ready) << cluster_.status().output;
  EXPECT_EQ(gpus_of(*waiter.get()), (std::vector<int>{0, 1}));
}

// A driver that does not come back to the restarted head: its groups, booked again from the
// journal, are released once the grace is over, and the waiting driver gets them.
TEST_F(SharedBook, ARestartedHeadReleasesWhatNoDriverBooksAgain) {
  auto first = std::make_unique<Cluster>(driver());
  auto held = std::make_unique<VirtualCluster>(*first, both_gpus("first", false));
  Cluster second(driver());
  auto waiter = std::async(std::launch::async, [&] {
    return std::make_unique<VirtualCluster>(second, both_gpus("second", true));
  });
  ASSERT_FALSE(status_once_waiting("virtual cluster second").empty());
  // The head hears nothing of the first driver's exit: stopped (every thread of it) first.
  ASSERT_TRUE(cluster_.stop_head());
  held.reset();
  first->shutdown();
  ASSERT_TRUE(cluster_.kill_and_restart_head({"--restore-grace-ms", "3000"}));
  // Booked again from the journal once its host registered: the first driver's group, on both
  // GPUs, held for a driver that does not come back.
  std::string status;
  ASSERT_TRUE(eventually(
      [&] {
        status = cluster_.status().output;
        auto groups = status.find("placement groups:");
        return groups != std::string::npos && status.find("first-", groups) != std::string::npos &&
               status.find("(GPUs 0 1)", groups) != std::string::npos;
      },
      kDeadline))
      << status << "\nhead.log:\n"
      << read_file(cluster_.dir() + "/head.log");
  ASSERT_EQ(waiter.wait_for(kDeadline), std::future_status::ready) << cluster_.status().output;
  EXPECT_EQ(gpus_of(*waiter.get()), (std::vector<int>{0, 1}));
  EXPECT_EQ(cluster_.status().output.find("first-"), std::string::npos);
}

TEST_F(SharedBook, AWaitGivesUpAtItsCreationTimeoutSayingSo) {
  Cluster first(driver()), second(driver());
  VirtualCluster held(first, both_gpus("first", false));
  auto opts = both_gpus("patient", true);
  opts.creation_timeout = 300ms;
  try {
    VirtualCluster never(second, opts);
    ADD_FAILURE() << "the first driver's GPUs were booked twice";
  } catch (const troupe::Error& e) {
    EXPECT_EQ(e.code(), troupe::ErrorCode::kResourceUnavailable);
    EXPECT_HAS(e.message(), "virtual cluster 'patient' waited 300 ms for resources");
  }
}

}  // namespace
}  // namespace troupe_failure
