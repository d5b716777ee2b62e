// Manual recreate_worker and the restart policy (max_restarts) together, with real processes
// (issue 22 item 2): a recreate replaces one incarnation exactly once, the death of an
// incarnation that is no longer current is recorded as stale and never restarted, and the
// budget counts each recreation once, also while workers are SIGKILLed concurrently. The test
// ends by checking that every process it saw is gone.
#include <signal.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "integration/failure_classes.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using troupe::RestartEvent;
using troupe::Worker;
using troupe::WorkerGroup;
using Action = troupe::RestartEvent::Action;

// The decisions so far, by the incarnation that died.
std::map<std::string, RestartEvent> decisions(const WorkerGroup& group) {
  std::map<std::string, RestartEvent> out;
  for (const auto& e : group.restart_events()) {
    EXPECT_FALSE(out.count(e.incarnation)) << "two decisions about " << e.incarnation;
    out[e.incarnation] = e;
  }
  return out;
}

void expect_decision(const std::map<std::string, RestartEvent>& d, const std::string& incarnation,
                     Action action, const std::string& detail) {
  auto it = d.find(incarnation);
  ASSERT_NE(it, d.end()) << "no decision about " << incarnation;
  EXPECT_EQ(it->second.action, action) << incarnation << ": " << it->second.detail;
  EXPECT_EQ(it->second.detail, detail) << incarnation;
}

// Three workers, max_restarts 2. Hand-computed expectation, phase by phase (base names b0, b1,
// b2; restarts() counts every recreation, manual or by the policy, against the budget):
//  A. recreate_worker(0) on live b0        -> b0-r1; b0's death stale.        restarts [1,0,0]
//  B. recreate_worker(1) on live b1, while b0-r1 and b2 are SIGKILLed
//                                          -> b1-r1 (manual; b1 stale), b0-r2 and b2-r1 (policy)
//                                                                              restarts [2,1,1]
//  C. recreate_worker(2) on live b2-r1, while b0-r2 is SIGKILLed
//                                          -> b2-r2 (manual; b2-r1 stale); b0-r2 stays dead
//                                             (budget spent)                   restarts [2,1,2]
//  D. SIGKILL b1-r1                        -> b1-r2 (its last restart)         restarts [2,2,2]
// Seven decisions in all, one per death; no incarnation is replaced twice.
TEST(RestartRace, ManualRecreatesAndKillsEachReplaceAnIncarnationOnce) {
  become_subreaper();
  troupe::Cluster cluster(quiet_cluster(1, 3, 4));
  ProcessSet procs;
  {
    troupe::VirtualCluster vc(cluster, vc_options({3}));
    WorkerGroup group(vc, troupe::WorkerBuilder("FailProbe"), group_options("race", 2));
    procs.add_cluster(cluster);
    const std::string b0 = group.worker(0).name(), b1 = group.worker(1).name(),
                      b2 = group.worker(2).name();
    auto decided = [&](size_t n) {
      return eventually([&] { return group.restart_events().size() >= n; }, kDeadline);
    };
    auto kill_worker = [&](size_t idx) {
      Worker w = group.worker(idx);
      ASSERT_EQ(::kill(w.pid(), SIGKILL), 0) << w.name();
    };

    // A: the repro.
    Worker r = group.recreate_worker(0);
    procs.add_tree(r.pid(), r.name());
    ASSERT_TRUE(decided(1));
    expect_decision(decisions(group), b0, Action::kStale, "already replaced by " + b0 + "-r1");
    EXPECT_EQ(group.worker(0).name(), b0 + "-r1");
    EXPECT_EQ(group.restarts(0), 1);

    // B: a manual recreate while two other workers are killed.
    std::thread manual([&] { group.recreate_worker(1); });
    kill_worker(0);
    kill_worker(2);
    manual.join();
    ASSERT_TRUE(decided(4));
    auto d = decisions(group);
    expect_decision(d, b1, Action::kStale, "already replaced by " + b1 + "-r1");
    expect_decision(d, b0 + "-r1", Action::kRestarted, b0 + "-r2");
    expect_decision(d, b2, Action::kRestarted, b2 + "-r1");
    procs.add_group(group);

    // C: a manual recreate while a worker with no budget left is killed.
    std::thread manual2([&] { group.recreate_worker(2); });
    kill_worker(0);
    manual2.join();
    ASSERT_TRUE(decided(6));
    d = decisions(group);
    expect_decision(d, b2 + "-r1", Action::kStale, "already replaced by " + b2 + "-r2");
    expect_decision(d, b0 + "-r2", Action::kBudgetSpent, "not restarting: all 2 restarts are used");
    procs.add_group(group);

    // D: worker 1 had one restart left.
    kill_worker(1);
    ASSERT_TRUE(decided(7));
    expect_decision(decisions(group), b1 + "-r1", Action::kRestarted, b1 + "-r2");
    procs.add_group(group);

    EXPECT_EQ(group.restart_events().size(), 7u);
    EXPECT_EQ(group.worker(0).name(), b0 + "-r2");
    EXPECT_EQ(group.worker(1).name(), b1 + "-r2");
    EXPECT_EQ(group.worker(2).name(), b2 + "-r2");
    EXPECT_FALSE(group.worker(0).alive());
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(group.restarts(i), 2) << "worker " << i;
    for (size_t i : {1, 2})
      EXPECT_EQ(group.worker(i).call("echo", {{"x", 5}}).get(kDeadline),
                (troupe::Value(troupe::Map{{"rank", static_cast<int>(i)}, {"x", 5}})));
  }
  cluster.shutdown();
  EXPECT_TRUE(procs.all_gone(10s));
}

}  // namespace
}  // namespace troupe_failure
