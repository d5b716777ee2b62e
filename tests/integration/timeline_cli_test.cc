// `troupe timeline` against real clusters it did not start (issue 21, item 1): a standing head and
// two agents on loopback (`troupe start ... --block`), driven by this test process as a user's
// driver would be, and an embedded cluster found through its session directory.
// - The trace has one process track per running worker, labelled as the driver labels it
//   ("group/rank name (pid N) @host"), no driver track (otherData says why), exactly the calls
//   this test made to each worker as "call" spans named by the method, and every event inside
//   this test's own CLOCK_MONOTONIC window once placed on the command's clock (ts_origin_ns,
//   allowing the stated clock error bound: all hosts are this machine, so the true offset is 0).
// - A SIGSTOPped worker is listed as missing by the deadline (--timeout), the others are written.
// - No cluster, no running worker, and an output that cannot be written are errors (exit 1).
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using json = nlohmann::json;

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A written trace: labels by process id, and each label's events (metadata left out).
struct Trace {
  json doc;
  std::map<int, std::string> label_of;
  std::map<std::string, std::vector<json>> events;

  explicit Trace(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    doc = json::parse(s.str());
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "M" && e["name"] == "process_name")
        label_of[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] != "M") events[label_of.at(e["pid"].get<int>())].push_back(e);
  }
  size_t count(const std::string& label, const std::string& cat, const std::string& name) const {
    size_t n = 0;
    if (auto it = events.find(label); it != events.end())
      for (const auto& e : it->second) n += e["cat"] == cat && e["name"] == name;
    return n;
  }
};

std::string label_of(const troupe::Cluster& cluster, const troupe::WorkerGroup& group,
                     size_t rank) {
  troupe::Worker w = group.worker(rank);
  std::string host = "?";
  for (const auto& h : cluster.hosts())
    if (h.index == w.host()) host = h.name;
  return group.name() + "/" + std::to_string(rank) + " " + w.name() + " (pid " +
         std::to_string(w.pid()) + ") @" + host;
}

// A head on 127.0.0.1 and the agents tl-a (127.0.0.43) and tl-b (127.0.0.44), 2 CPUs each; this
// process is a driver of it (TROUPE_ADDRESS). Stopped at the end.
class StandingTimeline : public testing::Test {
 protected:
  StandingTimeline() {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", "timeline-cli-test-token");
    // Host loss after 10 s for the head, agents and driver: a loaded (sanitizer) run is slow.
    if (!cluster_.start_head({"--host-lost-ms", "10000"})) return;
    address_ = cluster_.address();
    envs_.set("TROUPE_ADDRESS", address_);
    cluster_.start_agents({{"tl-a", "127.0.0.43"}, {"tl-b", "127.0.0.44"}},
                          {"--host-lost-ms", "10000"});
  }
  CommandRun timeline(std::vector<std::string> args,
                      std::chrono::milliseconds deadline = kDeadline) {
    args.insert(args.begin(), {TROUPE_CLI_PATH, "timeline", "--address", address_});
    return run_command(args, deadline);
  }
  // A group of 2 FailProbe workers, one on each host.
  std::unique_ptr<troupe::WorkerGroup> start_group(troupe::Cluster& driver,
                                                   std::unique_ptr<troupe::VirtualCluster>& vc,
                                                   const std::string& name) {
    auto vc_opts = vc_options({1, 1});
    vc_opts.use_gpus = false;
    vc = std::make_unique<troupe::VirtualCluster>(driver, vc_opts);
    return std::make_unique<troupe::WorkerGroup>(*vc, troupe::WorkerBuilder("FailProbe"),
                                                 group_options(name));
  }

  TempDir dir_;
  ScopedEnvs envs_;
  StandingCluster cluster_{TROUPE_CLI_PATH, dir_.path()};
  std::string address_;
};

// 3 group calls of `echo` (each worker 1 each) and 2 more to rank 1: the trace has 3 and 5 echo
// spans, on tracks labelled as the driver's are, inside this test's window.
TEST_F(StandingTimeline, WritesEveryWorkersCallsOnAlignedClocks) {
  auto options = troupe::ClusterOptions::local(1);  // TROUPE_ADDRESS: the standing head
  options.log_to_driver = false;
  options.host_lost_timeout = 10s;  // as the head and agents: a loaded (sanitizer) run is slow
  troupe::Cluster driver(options);
  const int64_t window_begin = monotonic_ns();
  std::unique_ptr<troupe::VirtualCluster> vc;
  auto group = start_group(driver, vc, "tlcli");
  const size_t kGroupCalls = 3, kMoreToRank1 = 2;
  for (size_t i = 0; i < kGroupCalls; ++i)
    ASSERT_EQ(group->run_all_workers_single_data("echo", {{"x", 1}}).get().size(), 2u);
  for (size_t i = 0; i < kMoreToRank1; ++i)
    ASSERT_TRUE(group->worker(1).call("echo", {{"x", 2}}).wait_for(kDeadline));
  const int64_t window_end = monotonic_ns();
  ASSERT_NE(group->worker(0).host(), group->worker(1).host());

  const std::string path = dir_.path() + "/trace.json";
  CommandRun r = timeline({"-o", path});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "troupe timeline: the driver's track is not in the trace");
  Trace trace(path);
  EXPECT_EQ(trace.label_of.size(), 2u);  // the 2 workers; no driver
  const json& other = trace.doc["otherData"];
  EXPECT_HAS(other["driver"].get<std::string>(), "cannot reach the driver");
  EXPECT_TRUE(other["missing"].empty()) << other["missing"];
  EXPECT_EQ(other["recording"], true);
  const double error_us = other["clock_error_bound_us"].get<double>();
  EXPECT_GT(error_us, 0);
  EXPECT_LT(error_us, 100000);  // a loopback round trip: well under 0.2 s
  size_t events = 0;
  for (size_t rank = 0; rank < 2; ++rank) {
    const std::string label = label_of(driver, *group, rank);
    ASSERT_TRUE(trace.events.count(label)) << "no track " << label << " in " << trace.doc;
    const size_t want = kGroupCalls + (rank == 1 ? kMoreToRank1 : 0);
    EXPECT_EQ(trace.count(label, "call", "echo"), want) << label;
    EXPECT_EQ(trace.count(label, "phase", "constructor"), 1u) << label;
    for (const auto& e : trace.events.at(label))
      if (e["cat"] == "call") {
        EXPECT_EQ(e["args"]["method"], "echo");
        EXPECT_EQ(e["args"]["group"], group->name());
        EXPECT_EQ(e["args"]["rank"], rank);
      }
  }
  // Every event on this test's CLOCK_MONOTONIC (all hosts are this machine), within the window.
  const double origin_ns = other["ts_origin_ns"].get<double>();
  const double slack_ns = error_us * 1000 + 1000;  // the bound, and the ts rounding to ns
  for (const auto& [label, list] : trace.events)
    for (const auto& e : list) {
      ++events;
      const double start = origin_ns + e["ts"].get<double>() * 1000;
      const double end = start + (e.contains("dur") ? e["dur"].get<double>() * 1000 : 0);
      EXPECT_GE(start, window_begin - slack_ns) << e;
      EXPECT_LE(end, window_end + slack_ns) << e;
    }
  EXPECT_HAS(r.output, "wrote " + path + ": 2 tracks, " + std::to_string(events) + " events, ");
  EXPECT_HAS(r.output, "; missing: none\n");

  // An output that cannot be written: exit 1 naming it.
  r = timeline({"-o", dir_.path() + "/no-such-dir/trace.json"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "troupe timeline: cannot write the timeline to '" + dir_.path() +
                           "/no-such-dir/trace.json': No such file or directory");
}

// A worker stopped with SIGSTOP does not hold the command past its --timeout: it is listed as
// missing and the other worker's track is written.
TEST_F(StandingTimeline, AStoppedWorkerIsMissingAndTheOthersAreWritten) {
  auto options = troupe::ClusterOptions::local(1);
  options.log_to_driver = false;
  options.host_lost_timeout = 10s;  // as the head and agents: a loaded (sanitizer) run is slow
  troupe::Cluster driver(options);
  std::unique_ptr<troupe::VirtualCluster> vc;
  auto group = start_group(driver, vc, "tlstop");
  ASSERT_EQ(group->run_all_workers_single_data("echo", {{"x", 1}}).get().size(), 2u);
  troupe::Worker stopped = group->worker(1);
  ASSERT_EQ(::kill(stopped.pid(), SIGSTOP), 0);
  const std::string path = dir_.path() + "/trace.json";
  CommandRun r = timeline({"-o", path, "--timeout", "1"}, 4s);  // 1 s, and time to start and write
  ::kill(stopped.pid(), SIGCONT);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "; missing: " + stopped.name() + ": no connection in time\n");
  Trace trace(path);
  ASSERT_EQ(trace.doc["otherData"]["missing"].size(), 1u);
  EXPECT_EQ(trace.doc["otherData"]["missing"][0], stopped.name() + ": no connection in time");
  EXPECT_EQ(trace.count(label_of(driver, *group, 0), "call", "echo"), 1u);
  EXPECT_EQ(trace.events.count(label_of(driver, *group, 1)), 0u);  // a track without events
  EXPECT_EQ(trace.label_of.size(), 2u);
}

// A cluster without running workers, and no cluster at all: exit 1 with the reason.
TEST_F(StandingTimeline, NoWorkerOrNoClusterIsAnError) {
  const std::string path = dir_.path() + "/trace.json";
  CommandRun r = timeline({"-o", path});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "troupe timeline: no running worker in the cluster\n");
  EXPECT_FALSE(std::ifstream(path).good()) << "a trace was written";

  TempDir empty;  // no session of an embedded cluster
  ScopedEnvs envs;
  envs.set("TMPDIR", empty.path());
  r = run_command({TROUPE_CLI_PATH, "timeline", "-o", path}, kDeadline);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output,
             "troupe timeline: no running cluster found (give --address HOST:PORT or "
             "--session DIR)\n");
  r = run_command({TROUPE_CLI_PATH, "timeline", "--address", "127.0.0.1:1", "-o", path}, kDeadline);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "troupe timeline: ");
  EXPECT_HAS(r.output, "127.0.0.1:1");
}

// An embedded cluster (this process is its driver; its session is the newest in TMPDIR):
// `troupe timeline` without --address finds it.
TEST(EmbeddedClusterTimeline, FindsTheNewestSession) {
  TempDir dir;
  ScopedEnvs envs;
  envs.set("TMPDIR", dir.path());
  troupe::Cluster cluster(quiet_cluster(1, 0, 2));
  auto vc_opts = vc_options({1});
  vc_opts.use_gpus = false;
  troupe::VirtualCluster vc(cluster, vc_opts);
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("FailProbe"), group_options("solo"));
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(group.worker(0).call("echo", {{"x", i}}).wait_for(kDeadline));
  const std::string path = dir.path() + "/trace.json";
  CommandRun r = run_command({TROUPE_CLI_PATH, "timeline", "-o", path}, kDeadline);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Trace trace(path);
  EXPECT_EQ(trace.label_of.size(), 1u);
  EXPECT_EQ(trace.count(label_of(cluster, group, 0), "call", "echo"), 2u) << trace.doc;
}

}  // namespace
}  // namespace troupe_failure
