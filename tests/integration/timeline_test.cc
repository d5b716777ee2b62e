// Cluster::timeline through real processes (issue 21, item 1): a group of 2 workers on 2
// embedded hosts, one recreated, then 3 replicated `step` calls with 2 KiB arguments. The trace
// must have one track per worker and one for the driver, 3 `step` spans per worker with the
// argument bytes, each inside the driver's dispatch span once clocks are aligned (allowing the
// stated error bound), a death and a restart instant for the recreated worker, and start phases
// in order. A cluster with TROUPE_TIMELINE=0 writes a trace without call spans that says
// recording was off; a worker that does not answer is listed as missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "troupe/troupe.h"

namespace troupe_timeline {

class TimelineProbe {
 public:
  int64_t step(troupe::Bytes x) { return static_cast<int64_t>(x.size()); }
};

TROUPE_WORKER_CLASS(TimelineProbe, cls) { cls.method("step", &TimelineProbe::step, {"x"}); }

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
constexpr auto kDeadline = 20s;
constexpr size_t kArgBytes = 2048;  // each call's only argument: Bytes of 2 KiB

// A fresh directory under TMPDIR (or /tmp), removed at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/timeline-test-XXXXXX";
    if (::mkdtemp(pattern.data())) path_ = pattern;
  }
  ~TempDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

troupe::ClusterOptions two_hosts() {
  auto o = troupe::ClusterOptions::local(2, /*gpus_per_host=*/0, /*cpus_per_host=*/2);
  o.log_to_driver = false;
  return o;
}

troupe::VirtualClusterOptions one_bundle_per_host(const std::string& name) {
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = {1, 1};
  o.use_gpus = false;
  o.name = name;
  o.port_range_begin = 1700;
  o.port_range_end = 1760;
  return o;
}

troupe::WorkerGroupOptions group_options(const std::string& prefix) {
  troupe::WorkerGroupOptions o;
  o.name_prefix = prefix;
  o.show_progress = false;
  o.start_timeout = kDeadline;
  return o;
}

void call_steps(troupe::WorkerGroup& group, int n) {
  troupe::Bytes x(std::vector<uint8_t>(kArgBytes, 1));
  for (int i = 0; i < n; ++i) {
    auto results = group.run_all_workers_single_data("step", {{"x", x}}).get();
    ASSERT_EQ(results.size(), 2u);
    for (const auto& r : results) EXPECT_EQ(r.as_int(), static_cast<int64_t>(kArgBytes));
  }
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

// The trace's events by process: label -> its events (metadata excluded).
struct Trace {
  json doc;
  std::map<int, std::string> label_of;
  std::map<std::string, std::vector<json>> events;  // by label

  explicit Trace(const std::string& path) : doc(read_json(path)) {
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "M" && e["name"] == "process_name")
        label_of[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] != "M") events[label_of.at(e["pid"].get<int>())].push_back(e);
  }
  // The events on `label` with this cat and name.
  std::vector<json> find(const std::string& label, const std::string& cat,
                         const std::string& name) const {
    std::vector<json> out;
    auto it = events.find(label);
    if (it == events.end()) return out;
    for (const auto& e : it->second)
      if (e["cat"] == cat && e["name"] == name) out.push_back(e);
    std::sort(out.begin(), out.end(),
              [](const json& a, const json& b) { return a["ts"] < b["ts"]; });
    return out;
  }
};

double end_of(const json& span) { return span["ts"].get<double>() + span["dur"].get<double>(); }

std::string label_of(const troupe::Worker& w, const std::string& group, int rank) {
  return group + "/" + std::to_string(rank) + " " + w.name() + " (pid " + std::to_string(w.pid()) +
         ") @host-" + std::to_string(w.host());
}

TEST(Timeline, GroupCallsRecreateStartPhasesAndAlignedClocks) {
  troupe::Cluster cluster(two_hosts());
  troupe::VirtualCluster vc(cluster, one_bundle_per_host("tlvc"));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("TimelineProbe"), group_options("tl"));
  troupe::Worker old = group.worker(1);
  const std::string old_label = label_of(old, group.name(), 1) + " (dead)";
  group.recreate_worker(1);
  call_steps(group, 3);
  TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  troupe::TimelineSummary summary = cluster.timeline(path, 10s);
  EXPECT_TRUE(summary.recording);
  EXPECT_TRUE(summary.missing.empty()) << summary.missing.front();
  EXPECT_GT(summary.clock_error_us, 0);
  EXPECT_LT(summary.clock_error_us, 100000);  // a loopback round trip: well under 0.2 s

  Trace trace(path);
  const double err = summary.clock_error_us;
  EXPECT_DOUBLE_EQ(trace.doc["otherData"]["clock_error_bound_us"].get<double>(), err);
  EXPECT_EQ(trace.doc["otherData"]["recording"], true);
  const std::string driver = "driver (pid " + std::to_string(::getpid()) + ") @";
  size_t drivers = 0;
  for (const auto& [pid, label] : trace.label_of) drivers += label.rfind(driver, 0) == 0;
  ASSERT_EQ(drivers, 1u);
  std::string driver_label;
  for (const auto& [pid, label] : trace.label_of)
    if (label.rfind(driver, 0) == 0) driver_label = label;
  // Tracks: the driver, the 2 live workers and the replaced one (the driver's events of it).
  EXPECT_EQ(trace.label_of.size(), 4u);
  EXPECT_EQ(summary.tracks, 4u);

  auto dispatches = trace.find(driver_label, "dispatch", "step");
  ASSERT_EQ(dispatches.size(), 3u);
  for (const auto& d : dispatches) {
    EXPECT_EQ(d["args"]["group"], group.name());
    EXPECT_EQ(d["args"]["workers"], 2);
  }
  EXPECT_EQ(trace.find(driver_label, "send", "step").size(), 6u);  // 3 calls x 2 workers

  for (int rank = 0; rank < 2; ++rank) {
    troupe::Worker w = group.worker(static_cast<size_t>(rank));
    const std::string label = label_of(w, group.name(), rank);
    ASSERT_TRUE(trace.events.count(label)) << "no track " << label;
    auto calls = trace.find(label, "call", "step");
    ASSERT_EQ(calls.size(), 3u) << label;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(calls[i]["args"]["args_bytes"], kArgBytes);
      EXPECT_EQ(calls[i]["args"]["rank"], rank);
      EXPECT_EQ(calls[i]["args"]["group"], group.name());
      EXPECT_EQ(calls[i]["tid"], 1);
      // The i-th call ran inside the i-th dispatch (calls to a group complete before the next).
      EXPECT_GE(calls[i]["ts"].get<double>(), dispatches[i]["ts"].get<double>() - err) << label;
      EXPECT_LE(end_of(calls[i]), end_of(dispatches[i]) + err) << label;
    }
    // Start phases in order: spawn and connect seen by the driver, then the constructor.
    auto spawn = trace.find(label, "phase", "spawn");
    auto connect = trace.find(label, "phase", "connect");
    auto ctor = trace.find(label, "phase", "constructor");
    ASSERT_EQ(spawn.size(), 1u) << label;
    ASSERT_EQ(connect.size(), 1u) << label;
    ASSERT_EQ(ctor.size(), 1u) << label;
    const double rounding = 0.002;  // both on the driver's clock; ts are rounded to ns
    EXPECT_LE(end_of(spawn[0]), connect[0]["ts"].get<double>() + rounding);
    EXPECT_LE(end_of(connect[0]), ctor[0]["ts"].get<double>() + err);
    EXPECT_LE(end_of(ctor[0]), calls[0]["ts"].get<double>() + rounding);
  }
  // The recreated worker: its predecessor's death, and its restart.
  auto deaths = trace.find(old_label, "death", "death");
  ASSERT_EQ(deaths.size(), 1u) << "no death on " << old_label;
  EXPECT_EQ(deaths[0]["ph"], "i");
  const std::string fresh_label = label_of(group.worker(1), group.name(), 1);
  auto restarts = trace.find(fresh_label, "restart", "restart");
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0]["ph"], "i");
  EXPECT_NE(restarts[0]["args"]["detail"].get<std::string>().find(old.name()), std::string::npos);
  EXPECT_GE(restarts[0]["ts"].get<double>(), deaths[0]["ts"].get<double>());
  EXPECT_TRUE(trace.find(label_of(group.worker(0), group.name(), 0), "death", "death").empty());
}

TEST(Timeline, RecordingOffWritesNoCallsAndSaysSo) {
  auto envs = std::make_unique<ScopedEnvs>();
  envs->set("TROUPE_TIMELINE", "0");  // read as the Cluster is constructed
  troupe::Cluster cluster(two_hosts());
  envs.reset();
  troupe::VirtualCluster vc(cluster, one_bundle_per_host("tloff"));
  troupe::WorkerGroup group(vc, troupe::WorkerBuilder("TimelineProbe"), group_options("off"));
  call_steps(group, 3);
  TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  troupe::TimelineSummary summary = cluster.timeline(path, 10s);
  EXPECT_FALSE(summary.recording);
  EXPECT_TRUE(summary.missing.empty());
  Trace trace(path);
  EXPECT_EQ(trace.doc["otherData"]["recording"], false);
  EXPECT_EQ(trace.label_of.size(), 3u);  // the tracks are there (driver and 2 workers) ...
  EXPECT_EQ(summary.events, 0u);         // ... but nothing was recorded on them
  for (const auto& [label, events] : trace.events) EXPECT_TRUE(events.empty()) << label;
}

TEST(Timeline, AWorkerThatDoesNotAnswerIsListedMissing) {
  troupe::Cluster cluster(two_hosts());
  troupe::Worker a = cluster.start_worker({.class_name = "TimelineProbe", .name = "answers"});
  troupe::Worker b =
      cluster.start_worker({.class_name = "TimelineProbe", .host = 1, .name = "stopped"});
  a.ready().get(kDeadline);
  b.ready().get(kDeadline);
  ASSERT_EQ(::kill(b.pid(), SIGSTOP), 0);
  TempDir dir;
  auto started = std::chrono::steady_clock::now();
  troupe::TimelineSummary summary = cluster.timeline(dir.path() + "/trace.json", 300ms);
  auto took = std::chrono::steady_clock::now() - started;
  ::kill(b.pid(), SIGCONT);
  ASSERT_EQ(summary.missing.size(), 1u);
  EXPECT_EQ(summary.missing[0].rfind("stopped: no answer", 0), 0u) << summary.missing[0];
  EXPECT_LT(took, 5s);  // the deadline, not a wait for the stopped worker
  Trace trace(dir.path() + "/trace.json");
  EXPECT_EQ(trace.doc["otherData"]["missing"][0], summary.missing[0]);
  // The answering worker's constructor is there.
  const std::string label = "answers (pid " + std::to_string(a.pid()) + ") @host-0";
  EXPECT_EQ(trace.find(label, "phase", "constructor").size(), 1u);
}

// Two clusters of one driver share its recorder: each one's trace has its own workers and
// dispatches only.
TEST(Timeline, TwoClustersOfOneDriverEachWriteOnlyTheirOwn) {
  troupe::Cluster first(two_hosts());
  troupe::Cluster second(two_hosts());
  troupe::VirtualCluster vc1(first, one_bundle_per_host("tl1"));
  troupe::WorkerGroup g1(vc1, troupe::WorkerBuilder("TimelineProbe"), group_options("one"));
  call_steps(g1, 2);
  troupe::Worker other = second.start_worker({.class_name = "TimelineProbe", .name = "other"});
  other.ready().get(kDeadline);
  TempDir dir;
  for (int which = 0; which < 2; ++which) {
    const std::string path = dir.path() + "/trace" + std::to_string(which) + ".json";
    troupe::TimelineSummary summary = (which == 0 ? first : second).timeline(path, 10s);
    EXPECT_TRUE(summary.missing.empty());
    Trace trace(path);
    // The driver and this cluster's workers: 2 of the group in the first, "other" in the second.
    EXPECT_EQ(summary.tracks, which == 0 ? 3u : 2u);
    EXPECT_EQ(trace.label_of.size(), summary.tracks);
    const std::string other_label = "other (pid " + std::to_string(other.pid()) + ") @host-0";
    EXPECT_EQ(trace.events.count(other_label), which == 0 ? 0u : 1u);
    size_t dispatches = 0;
    for (const auto& [label, events] : trace.events)
      for (const auto& e : events) dispatches += e["cat"] == "dispatch";
    EXPECT_EQ(dispatches, which == 0 ? 2u : 0u);  // call_steps(g1, 2): two group calls
  }
}

}  // namespace
}  // namespace troupe_timeline
