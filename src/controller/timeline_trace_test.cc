// The Chrome trace writer (controller/timeline_trace.h) over hand-made tracks: worker times moved
// onto the driver's clock by the track's offset, tracks and threads as the header lays them out,
// driver events about an unknown worker on a track of their own, and the metadata.
#include "controller/timeline_trace.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

namespace troupe::internal {
namespace {

using json = nlohmann::json;

const json* find_event(const json& trace, const std::string& name, const std::string& ph) {
  for (const auto& e : trace["traceEvents"])
    if (e["name"] == name && e["ph"] == ph) return &e;
  return nullptr;
}

TEST(ChromeTrace, AlignsWorkerClocksAndPlacesEvents) {
  TraceInput in;
  TraceTrack driver;
  driver.is_driver = true;
  driver.label = "driver (pid 1) @here";
  driver.collected = true;
  auto dispatch = timeline::make(timeline::Kind::kSpan, "dispatch", "step", 1000, 5000, "tl");
  dispatch.count = 2;
  driver.snapshot.events.push_back(dispatch);
  auto death = timeline::make(timeline::Kind::kInstant, "death", "death", 7000, 0, "signal 9");
  death.pid = 77;
  death.host = 1;
  driver.snapshot.events.push_back(death);
  in.tracks.push_back(driver);

  TraceTrack worker;
  worker.label = "tl/0 tl-0 (pid 55) @host-0";
  worker.worker = "tl-0";
  worker.group = "tl";
  worker.rank = 0;
  worker.host = 0;
  worker.pid = 55;
  worker.offset_ns = 1000000;  // its clock is 1 ms ahead of the driver's
  worker.error_ns = 20000;
  worker.collected = true;
  auto call = timeline::make(timeline::Kind::kSpan, "call", "step", 1002000, 1500);
  call.size = 2048;
  worker.snapshot.events.push_back(call);
  in.tracks.push_back(worker);
  in.missing = {"tl-1: no answer to the clock probe in time"};

  TimelineSummary summary;
  json trace = json::parse(chrome_trace_json(in, summary));
  EXPECT_EQ(summary.tracks, 3u);  // driver, tl-0, and the unknown pid 77
  EXPECT_EQ(summary.events, 3u);
  EXPECT_DOUBLE_EQ(summary.clock_error_us, 20.0);
  EXPECT_EQ(summary.missing, in.missing);

  const json* d = find_event(trace, "step", "X");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ((*d)["cat"], "dispatch");  // the first event: ts 0 is its start
  EXPECT_DOUBLE_EQ((*d)["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ((*d)["dur"].get<double>(), 5.0);
  EXPECT_EQ((*d)["pid"], 1);
  EXPECT_EQ((*d)["args"]["workers"], 2);
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "call") continue;  // metadata events have no cat
    // Worker time 1,002,000 ns - offset 1,000,000 ns = driver time 2000 ns: 1 us after the
    // dispatch started.
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.5);
    EXPECT_EQ(e["pid"], 2);
    EXPECT_EQ(e["tid"], 1);
    EXPECT_EQ(e["args"]["args_bytes"], 2048);
    EXPECT_EQ(e["args"]["group"], "tl");
    EXPECT_EQ(e["args"]["rank"], 0);
  }
  const json* i = find_event(trace, "death", "i");
  ASSERT_NE(i, nullptr);
  EXPECT_EQ((*i)["pid"], 3);
  EXPECT_EQ((*i)["tid"], 2);
  EXPECT_DOUBLE_EQ((*i)["ts"].get<double>(), 6.0);  // driver clock: no offset
  bool named = false;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == 3)
      named = e["args"]["name"] == "worker pid 77 @host 1";
  EXPECT_TRUE(named);
  EXPECT_EQ(trace["otherData"]["recording"], true);
  EXPECT_DOUBLE_EQ(trace["otherData"]["clock_error_bound_us"].get<double>(), 20.0);
  EXPECT_EQ(trace["otherData"]["missing"][0], in.missing[0]);
  EXPECT_EQ(trace["otherData"]["ts_origin_ns"], 1000);  // the dispatch's start
  EXPECT_FALSE(trace["otherData"].contains("driver"));
}

// Without a driver track (`troupe timeline`): worker tracks only, numbered from 1, times on the
// collector's clock from the earliest worker event, and otherData says why there is no driver.
TEST(ChromeTrace, WithoutADriverTrackSaysWhy) {
  TraceInput in;
  in.collector = "the troupe timeline process";
  in.no_driver = "not reachable";
  for (int w = 0; w < 2; ++w) {
    TraceTrack t;
    t.label = "w" + std::to_string(w);
    t.worker = t.label;
    t.pid = 10 + w;
    t.host = w;
    t.offset_ns = 500.0 * w;  // worker 1's clock is 500 ns ahead
    t.collected = true;
    t.snapshot.events.push_back(
        timeline::make(timeline::Kind::kSpan, "call", "f", 3000 + 1500 * w, 100));
    in.tracks.push_back(t);
  }
  TimelineSummary summary;
  json trace = json::parse(chrome_trace_json(in, summary));
  EXPECT_EQ(summary.tracks, 2u);
  EXPECT_EQ(summary.events, 2u);
  EXPECT_EQ(trace["otherData"]["driver"], "not reachable");
  EXPECT_EQ(trace["otherData"]["ts_origin_ns"], 3000);  // worker 0's call, on its own clock
  EXPECT_EQ(trace["otherData"]["clock_reference"].get<std::string>().rfind(
                "the troupe timeline process's CLOCK_MONOTONIC", 0),
            0u);
  std::map<int, double> ts;  // by pid: worker 1's call at 4500 - 500 = 4000 ns, 1 us after
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") ts[e["pid"].get<int>()] = e["ts"].get<double>();
  EXPECT_EQ(ts, (std::map<int, double>{{1, 0.0}, {2, 1.0}}));
}

}  // namespace
}  // namespace troupe::internal
