// The metrics registry and its text exposition (format 0.0.4). Every expected text is written
// out by hand from the format's rules: HELP and TYPE lines per family, children in label order,
// histogram buckets cumulative with le bounds, then _sum and _count.
#include "common/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "troupe/error.h"

namespace troupe::metrics {
namespace {

TEST(Metrics, CountersAndGaugesRenderWithLabelsInOrder) {
  Registry r;
  auto& calls = r.counter_family("troupe_calls_started_total", "Calls sent.", {"method", "group"});
  calls.with({"step", "policy"}).inc(5);
  calls.with({"eval", "policy"}).inc();
  calls.with({"step", "policy"}).inc(2);
  Gauge& up = r.gauge("troupe_hosts_up", "Hosts whose agent is connected.");
  up.set(3);
  auto& workers = r.gauge_family("troupe_workers", "Workers by state.", {"state"});
  workers.with({"running"}).set(2);
  workers.with({"starting"}).set(0.5);
  EXPECT_EQ(r.render(),
            "# HELP troupe_calls_started_total Calls sent.\n"
            "# TYPE troupe_calls_started_total counter\n"
            "troupe_calls_started_total{method=\"eval\",group=\"policy\"} 1\n"
            "troupe_calls_started_total{method=\"step\",group=\"policy\"} 7\n"
            "# HELP troupe_hosts_up Hosts whose agent is connected.\n"
            "# TYPE troupe_hosts_up gauge\n"
            "troupe_hosts_up 3\n"
            "# HELP troupe_workers Workers by state.\n"
            "# TYPE troupe_workers gauge\n"
            "troupe_workers{state=\"running\"} 2\n"
            "troupe_workers{state=\"starting\"} 0.5\n");
}

// Bounds 0.1 and 1 with observations 0.05, 0.1 (le is inclusive), 0.5 and 3: buckets hold 2
// (<= 0.1), 3 (<= 1) and 4 (+Inf); the sum is 3.65.
TEST(Metrics, HistogramBucketsAreCumulativeWithInclusiveBounds) {
  Registry r;
  auto& latency =
      r.histogram_family("troupe_call_latency_seconds", "Call latency.", {"method"}, {0.1, 1});
  Histogram& h = latency.with({"step"});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);
  EXPECT_EQ(r.render(),
            "# HELP troupe_call_latency_seconds Call latency.\n"
            "# TYPE troupe_call_latency_seconds histogram\n"
            "troupe_call_latency_seconds_bucket{method=\"step\",le=\"0.1\"} 2\n"
            "troupe_call_latency_seconds_bucket{method=\"step\",le=\"1\"} 3\n"
            "troupe_call_latency_seconds_bucket{method=\"step\",le=\"+Inf\"} 4\n"
            "troupe_call_latency_seconds_sum{method=\"step\"} 3.65\n"
            "troupe_call_latency_seconds_count{method=\"step\"} 4\n");
}

TEST(Metrics, UnlabelledHistogramHasOnlyLe) {
  Registry r;
  Histogram& h = r.histogram("rtt_seconds", "Round trips.", {0.25});
  h.observe(0.25);
  EXPECT_EQ(r.render(),
            "# HELP rtt_seconds Round trips.\n"
            "# TYPE rtt_seconds histogram\n"
            "rtt_seconds_bucket{le=\"0.25\"} 1\n"
            "rtt_seconds_bucket{le=\"+Inf\"} 1\n"
            "rtt_seconds_sum 0.25\n"
            "rtt_seconds_count 1\n");
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
  Registry r;
  r.counter_family("c_total", "a \\ b\nc", {"method"}).with({"say \"hi\"\\\n"}).inc();
  EXPECT_EQ(r.render(),
            "# HELP c_total a \\\\ b\\nc\n"
            "# TYPE c_total counter\n"
            "c_total{method=\"say \\\"hi\\\"\\\\\\n\"} 1\n");
}

TEST(Metrics, FormatsValues) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(-4), "-4");
  EXPECT_EQ(format_value(0.0001), "0.0001");
  EXPECT_EQ(format_value(2.5), "2.5");
  EXPECT_EQ(format_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_value(0.0 / 0.0), "NaN");
}

TEST(Metrics, RefreshersRunBeforeRendering) {
  Registry r;
  Gauge& g = r.gauge("objects", "Objects.");
  int source = 41;
  r.on_render([&] { g.set(++source); });
  EXPECT_EQ(r.render(), "# HELP objects Objects.\n# TYPE objects gauge\nobjects 42\n");
}

TEST(Metrics, RejectsBadNamesDuplicatesAndLabelCounts) {
  Registry r;
  r.counter("ok_total", "x");
  try {
    r.counter("ok_total", "again");
    FAIL() << "a duplicate name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "metric ok_total is registered already");
  }
  try {
    r.gauge("9lives", "x");
    FAIL() << "a name starting with a digit was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "bad metric name '9lives'");
  }
  try {
    r.histogram_family("h", "x", {"le"}, {1});
    FAIL() << "the label le was accepted on a histogram";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "bad label name 'le' of metric h");
  }
  auto& f = r.counter_family("calls_total", "x", {"method"});
  try {
    f.with({"a", "b"});
    FAIL() << "two values for one label were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "metric calls_total has 1 label(s), given 2 value(s)");
  }
}

// 4 threads x 10,000 increments and observations: nothing is lost.
TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  Registry r;
  Counter& c = r.counter("n_total", "n");
  Histogram& h = r.histogram("h", "h", {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000u);
  EXPECT_EQ(h.count(), 40000u);
  EXPECT_EQ(h.sum(), 40000.0);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{0, 40000}));
}

}  // namespace
}  // namespace troupe::metrics
