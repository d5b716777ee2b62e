// Orphan-free shutdown with real processes (ARCHITECTURE.md: "No orphans"): WorkerGroup::shutdown
// with a cleanup method, a cleanup that hangs, a worker that ignores SIGTERM, workers that forked
// children, force; Cluster destruction without an explicit shutdown; and a driver killed with
// SIGKILL (the `troupe demo` CLI), whose agents must notice the lost head and reap their workers.
// Every test checks the process table for leftovers within a bounded wait.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using troupe::Cluster;
using troupe::ErrorCode;
using troupe::ShutdownOptions;
using troupe::ShutdownReport;
using troupe::VirtualCluster;
using troupe::Worker;
using troupe::WorkerBuilder;
using troupe::WorkerGroup;

std::string problems_of(const ShutdownReport& r) {
  std::string out;
  for (const auto& p : r.problems) out += "\n  " + p;
  return out;
}

// One 2-host cluster per test with a VirtualCluster {2, 1} and a 3-worker FailProbe group whose
// cleanup markers go to a temporary directory.
class GroupShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    become_subreaper();
    cluster_ = std::make_unique<Cluster>(quiet_cluster(2, 2, 4));
    vc_ = std::make_unique<VirtualCluster>(*cluster_, vc_options({2, 1}));
  }
  void TearDown() override {
    group_.reset();
    vc_.reset();
    procs_.add_cluster(*cluster_);
    cluster_.reset();
    EXPECT_TRUE(procs_.all_gone(10s));
  }
  WorkerGroup& start_group(troupe::Kwargs args = {}) {
    auto options = group_options("closing");
    options.env_vars["FAIL_MARKER_DIR"] = markers_.path();
    group_ =
        std::make_unique<WorkerGroup>(*vc_, WorkerBuilder("FailProbe", std::move(args)), options);
    procs_.add_group(*group_);
    return *group_;
  }
  bool marker_of(const Worker& w) const {
    return std::filesystem::exists(markers_.path() + "/" + w.name());
  }

  TempDir markers_;
  ProcessSet procs_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<VirtualCluster> vc_;
  std::unique_ptr<WorkerGroup> group_;
};

TEST_F(GroupShutdownTest, CleanShutdownRunsTheCleanupMethodAndIsIdempotent) {
  WorkerGroup& group = start_group();
  ASSERT_EQ(procs_.size(), 3u);
  ShutdownOptions o;
  o.cleanup_method = "write_marker";
  auto t0 = std::chrono::steady_clock::now();
  ShutdownReport report = group.shutdown(o);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_TRUE(report.clean) << problems_of(report);
  EXPECT_TRUE(report.problems.empty()) << problems_of(report);
  for (const auto& w : group.workers()) {
    EXPECT_TRUE(marker_of(w)) << "no cleanup marker from " << w.name();
    EXPECT_FALSE(w.alive());
  }
  EXPECT_TRUE(procs_.all_gone(5s));
  // Idempotent: the same report, and nothing runs again.
  ShutdownReport again = group.shutdown(ShutdownOptions{});
  EXPECT_EQ(again.clean, report.clean);
  EXPECT_EQ(again.problems, report.problems);
  EXPECT_EQ(error_of(group.worker(0).call("echo", {{"x", 1}})).code(), ErrorCode::kWorkerDied);
  // The cluster is still usable: a new group starts on the same bundles.
  WorkerGroup& next = start_group();
  EXPECT_EQ(next.get_all_worker_results(next.run_all_workers_single_data("pid")).size(), 3u);
}

TEST_F(GroupShutdownTest, HangingCleanupTimesOutAndStillLeavesNoProcess) {
  WorkerGroup& group = start_group();
  ShutdownOptions o;
  o.cleanup_method = "hang";
  o.timeout = 500ms;
  o.grace = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  ShutdownReport report = group.shutdown(o);
  const double took = seconds_since(t0);
  EXPECT_LT(took, 5.0);
  EXPECT_GE(took, 0.5);
  EXPECT_FALSE(report.clean);
  ASSERT_FALSE(report.problems.empty());
  std::string all = problems_of(report);
  EXPECT_HAS(all, "hang");
  EXPECT_HAS(all, "did not finish within 500 ms");
  for (const auto& w : group.workers()) EXPECT_HAS(all, w.name());
  EXPECT_TRUE(procs_.all_gone(5s));
  EXPECT_EQ(group.shutdown().problems, report.problems);
}

TEST_F(GroupShutdownTest, WorkerIgnoringSigtermIsKilledAfterTheGrace) {
  WorkerGroup& group = start_group({{"ignore_sigterm", true}});
  ShutdownOptions o;
  o.grace = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  ShutdownReport report = group.shutdown(o);
  const double took = seconds_since(t0);
  EXPECT_LT(took, 5.0);
  EXPECT_GE(took, 0.3);
  EXPECT_FALSE(report.clean);
  std::string all = problems_of(report);
  for (const auto& w : group.workers()) EXPECT_HAS(all, w.name() + " did not stop on SIGTERM");
  EXPECT_HAS(all, "signal 9");
  EXPECT_TRUE(procs_.all_gone(5s));
  ShutdownReport again = group.shutdown(o);
  EXPECT_FALSE(again.clean);
  EXPECT_EQ(again.problems, report.problems);
}

TEST_F(GroupShutdownTest, ChildrenForkedByWorkersGoToo) {
  WorkerGroup& group = start_group();
  std::vector<pid_t> children;
  for (const auto& w : group.workers()) {
    pid_t child = static_cast<pid_t>(w.call<int64_t>("spawn_sleeper").get(kDeadline));
    auto stat = proc_stat(child);
    ASSERT_TRUE(stat);
    EXPECT_EQ(stat->pgrp, w.pid()) << "the child is not in its worker's process group";
    procs_.add(child, "sleep forked by " + w.name());
    children.push_back(child);
  }
  ShutdownReport report = group.shutdown();
  EXPECT_TRUE(report.clean) << problems_of(report);
  EXPECT_TRUE(procs_.all_gone(5s));
}

TEST_F(GroupShutdownTest, ForceSkipsTheCleanupAndKillsAtOnce) {
  WorkerGroup& group = start_group({{"ignore_sigterm", true}});
  ShutdownOptions o;
  o.cleanup_method = "write_marker";
  o.force = true;
  o.grace = 10s;  // force ignores it
  auto t0 = std::chrono::steady_clock::now();
  group.shutdown(o);
  EXPECT_LT(seconds_since(t0), 3.0);
  for (const auto& w : group.workers()) EXPECT_FALSE(marker_of(w)) << w.name() << " cleaned up";
  EXPECT_TRUE(procs_.all_gone(5s));
}

// Destructors alone (WorkerGroup, VirtualCluster, Cluster) leave nothing behind, including a
// worker started outside any group and the child it forked.
TEST(ClusterShutdown, DestructionWithoutShutdownLeavesNoProcess) {
  become_subreaper();
  ProcessSet procs;
  auto t0 = std::chrono::steady_clock::now();
  {
    Cluster cluster(quiet_cluster(2, 2, 4));
    VirtualCluster vc(cluster, vc_options({1, 1}));
    WorkerGroup group(vc, WorkerBuilder("FailProbe"), group_options("dropped"));
    troupe::WorkerOptions o;
    o.class_name = "FailProbe";
    o.name = "loose";
    o.host = 1;
    Worker loose = cluster.start_worker(o);
    loose.call("spawn_sleeper").get(kDeadline);
    auto busy = group.worker(0).call("sleep_ms", {{"ms", 60000}});  // in flight at destruction
    procs.add_cluster(cluster);
    EXPECT_GE(procs.size(), 2u + 3u + 1u);  // agents, workers, the forked child
    t0 = std::chrono::steady_clock::now();
  }
  EXPECT_LT(seconds_since(t0), 15.0);
  EXPECT_TRUE(procs.all_gone(10s));
}

// A Worker handle may outlive its Cluster: here one whose process died in a call (its state
// waited for the agent's exit report on a timer of the cluster's I/O loop) is destroyed after
// the cluster; the call has failed with the death, and nothing is touched after it was freed
// (the ASan variant checks the last part).
TEST(ClusterShutdown, AWorkerHandleOutlivesItsClusterAfterADeathInACall) {
  std::optional<Worker> survivor;
  {
    Cluster cluster(quiet_cluster(1, 1, 2));
    troupe::WorkerOptions o;
    o.class_name = "FailProbe";
    o.name = "survivor";
    survivor = cluster.start_worker(o);
    const auto pid = static_cast<pid_t>(survivor->call("pid").get(kDeadline).as_int());
    auto in_flight = survivor->call("sleep_ms", {{"ms", 60000}});
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    try {
      in_flight.get(kDeadline);
      FAIL() << "a call outlived its worker";
    } catch (const troupe::Error& e) {
      EXPECT_EQ(e.code(), troupe::ErrorCode::kWorkerDied) << e.what();
    }
  }
  EXPECT_FALSE(survivor->alive());
  survivor.reset();
}

// The process ids in `troupe status` output: agents ("agent pid N") and workers ("pid N").
std::set<pid_t> pids_in_status(const std::string& text) {
  std::set<pid_t> out;
  static const std::regex pid_re("pid (\\d+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pid_re);
       it != std::sregex_iterator(); ++it)
    out.insert(static_cast<pid_t>(std::stol((*it)[1])));
  return out;
}

// ARCHITECTURE.md: "an agent reaps the workers of a driver that vanished". The driver is `troupe
// demo`, killed with SIGKILL while it holds its cluster.
TEST(DriverDeath, AgentsReapTheWorkersOfAKilledDriver) {
  become_subreaper();
  TempDir dir;
  const std::string out = dir.path() + "/demo.out";
  const pid_t demo = spawn_to_file({TROUPE_CLI_PATH, "demo", "--hold", "60"}, out);
  ProcessSet procs;
  procs.add(demo, "troupe demo");
  bool holding = eventually(
      [&] {
        return read_file(out).find("holding the cluster") != std::string::npos ||
               ::waitpid(demo, nullptr, WNOHANG) == demo;
      },
      60s);
  const std::string text = read_file(out);
  if (!holding || text.find("holding the cluster") == std::string::npos) {
    ::kill(demo, SIGKILL);
    ::waitpid(demo, nullptr, 0);
    FAIL() << "the demo did not reach its hold:\n" << text;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("\\(session ([^)]+)\\)"))) << text;
  const std::string session = m[1];

  // The pids the CLI reports, and every descendant of the demo in /proc.
  std::string status = run_to_completion({TROUPE_CLI_PATH, "status", "--session", session}, 30s);
  EXPECT_HAS(status, "worker group policy");
  EXPECT_HAS(status, "agent pid");
  std::set<pid_t> reported = pids_in_status(status);
  procs.add_tree(demo, "troupe demo");
  for (pid_t p : reported) {
    EXPECT_TRUE(procs.contains(p))
        << "troupe status names pid " << p << ", which is not a descendant of the demo\n"
        << status;
    procs.add(p, "named by troupe status");
  }
  EXPECT_GE(reported.size(), 2u + 8u) << status;  // 2 agents, 4 workers, a group of 4
  EXPECT_GE(procs.size(), 1u + 2u + 8u);

  ASSERT_EQ(::kill(demo, SIGKILL), 0);
  ASSERT_EQ(::waitpid(demo, nullptr, 0), demo);
  EXPECT_TRUE(procs.all_gone(10s)) << "status before the kill:\n" << status;
  // Issue 8.4: the agents removed every socket, the dead driver's head socket included.
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(session + "/head.sock"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(session, ec))
    EXPECT_FALSE(e.is_socket()) << e.path() << " is left";
  std::filesystem::remove_all(session, ec);
}

}  // namespace
}  // namespace troupe_failure
