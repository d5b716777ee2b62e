// Prometheus metrics: counters, gauges and histograms, with or without labels, in a Registry
// that renders the text exposition format 0.0.4 (what a Prometheus server scrapes).
//
//   metrics::Registry r;
//   auto& calls = r.counter_family("troupe_calls_started_total", "Calls sent.", {"method"});
//   metrics::Counter& step = calls.with({"step"});   // look up once, keep the reference
//   step.inc();                                      // one relaxed atomic add
//   std::string text = r.render();
//
// Threads: everything is thread-safe. Updating a metric is lock-free (relaxed atomics: a
// counter add is one atomic add; a histogram observation is three). Looking a labelled child up
// (Family::with) takes the family's mutex: callers on hot paths keep the reference, which stays
// valid as long as the registry. render() takes each family's mutex in turn and reads the
// atomics without stopping updates, so a scrape may see one metric updated and another not yet.
// Lifetime: families and children are never removed (a label value that stops occurring keeps
// its last value, as Prometheus's own client libraries do unless told otherwise).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace troupe::metrics {

class Counter {
 public:
  void inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets with fixed upper bounds (ascending, finite; the +Inf bucket
// is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts, one per bound, then the +Inf bucket (== count()).
  std::vector<uint64_t> cumulative_counts() const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Latency buckets in seconds, 100 µs to 10 s.
std::vector<double> latency_buckets();

enum class Type { kCounter, kGauge, kHistogram };

// One metric name and its children, one per combination of label values.
template <typename T>
class Family {
 public:
  // The child for `values` (one per label name, in order), created at first use. Throws
  // Error(kInvalidArgument) when the count differs from the label names'.
  T& with(const std::vector<std::string>& values);

 private:
  friend class Registry;
  Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
         std::vector<double> bounds)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(type),
        label_names_(std::move(label_names)),
        bounds_(std::move(bounds)) {}
  void render(std::string& out) const;

  const std::string name_, help_;
  const Type type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  // Families by name, rendered in the order they were registered. A name must match
  // [a-zA-Z_:][a-zA-Z0-9_:]* and be new, label names [a-zA-Z_][a-zA-Z0-9_]*; otherwise
  // Error(kInvalidArgument) naming it.
  CounterFamily& counter_family(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names);
  GaugeFamily& gauge_family(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names);
  HistogramFamily& histogram_family(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names,
                                    std::vector<double> bounds);
  // Unlabelled metrics (a family with no labels and its one child).
  Counter& counter(const std::string& name, const std::string& help);
  Gauge& gauge(const std::string& name, const std::string& help);
  Histogram& histogram(const std::string& name, const std::string& help,
                       std::vector<double> bounds);

  // Runs before every render(), on the rendering thread: sets gauges whose values are read
  // rather than counted (hosts up, objects in the store). Not under any lock of the registry.
  void on_render(std::function<void()> refresh);

  // The text exposition format 0.0.4: per family "# HELP", "# TYPE", then one line per child
  // (histograms: _bucket lines with le, _sum and _count).
  std::string render() const;

 private:
  struct Entry {
    Type type;
    std::shared_ptr<void> family;
  };
  void add(const std::string& name, const std::vector<std::string>& label_names, Entry entry);

  mutable std::mutex mu_;
  std::vector<Entry> families_;
  std::vector<std::string> names_;
  std::vector<std::function<void()>> refreshers_;
};

// The exposition format's spelling of a sample value: integers without a fraction, others in the
// shortest form that reads back exactly, "+Inf", "-Inf", "NaN".
std::string format_value(double v);
// A label value escaped for the format (backslash, double quote, newline).
std::string escape_label_value(const std::string& v);

}  // namespace troupe::metrics
