#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "troupe/error.h"

namespace troupe::metrics {
namespace {

bool valid_name(const std::string& name, bool colon_allowed) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (colon_allowed && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escape_help(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

const char* type_name(Type t) {
  switch (t) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// {a="x",b="y"} of the names and values, with `extra` (e.g. le="0.5") last; "" when empty.
std::string label_text(const std::vector<std::string>& names,
                       const std::vector<std::string>& values, const std::string& extra = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + escape_label_value(values[i]) + "\"";
  if (!extra.empty()) out += (out.empty() ? "" : ",") + extra;
  return out.empty() ? out : "{" + out + "}";
}

void render_child(std::string& out, const std::string& name, const std::string& labels,
                  const Counter& c) {
  out += name + labels + " " + std::to_string(c.value()) + "\n";
}

void render_child(std::string& out, const std::string& name, const std::string& labels,
                  const Gauge& g) {
  out += name + labels + " " + format_value(g.value()) + "\n";
}

}  // namespace

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  // Fixed notation (0.0001, not 1e-04) where it stays short; the shortest that reads back.
  auto r = std::fabs(v) >= 1e-6 ? std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed)
                                : std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::vector<double> latency_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  // The first bound >= v ("le": less than or equal); past the last, the +Inf bucket.
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    out.push_back(total);
  }
  return out;
}

template <typename T>
T& Family<T>::with(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size())
    throw Error(ErrorCode::kInvalidArgument,
                "metric " + name_ + " has " + std::to_string(label_names_.size()) +
                    " label(s), given " + std::to_string(values.size()) + " value(s)");
  std::lock_guard<std::mutex> lock(mu_);
  auto& child = children_[values];
  if (!child) {
    if constexpr (std::is_same_v<T, Histogram>)
      child = std::make_unique<Histogram>(bounds_);
    else
      child = std::make_unique<T>();
  }
  return *child;
}

template <typename T>
void Family<T>::render(std::string& out) const {
  out += "# HELP " + name_ + " " + escape_help(help_) + "\n";
  out += "# TYPE " + name_ + " " + type_name(type_) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_) {
    if constexpr (std::is_same_v<T, Histogram>) {
      // _count is the +Inf bucket of the same reading, so the two always agree.
      auto counts = child->cumulative_counts();
      for (size_t i = 0; i <= bounds_.size(); ++i) {
        std::string le = "le=\"" + (i < bounds_.size() ? format_value(bounds_[i]) : "+Inf") + "\"";
        out += name_ + "_bucket" + label_text(label_names_, values, le) + " " +
               std::to_string(counts[i]) + "\n";
      }
      std::string labels = label_text(label_names_, values);
      out += name_ + "_sum" + labels + " " + format_value(child->sum()) + "\n";
      out += name_ + "_count" + labels + " " + std::to_string(counts.back()) + "\n";
    } else {
      render_child(out, name_, label_text(label_names_, values), *child);
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void Registry::add(const std::string& name, const std::vector<std::string>& label_names,
                   Entry entry) {
  if (!valid_name(name, true))
    throw Error(ErrorCode::kInvalidArgument, "bad metric name '" + name + "'");
  for (const auto& l : label_names)
    if (!valid_name(l, false) || l == "le" || l.rfind("__", 0) == 0)
      throw Error(ErrorCode::kInvalidArgument, "bad label name '" + l + "' of metric " + name);
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(names_.begin(), names_.end(), name) != names_.end())
    throw Error(ErrorCode::kInvalidArgument, "metric " + name + " is registered already");
  names_.push_back(name);
  families_.push_back(std::move(entry));
}

CounterFamily& Registry::counter_family(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names) {
  std::shared_ptr<CounterFamily> f(new CounterFamily(name, help, Type::kCounter, label_names, {}));
  add(name, label_names, Entry{Type::kCounter, f});
  return *f;
}

GaugeFamily& Registry::gauge_family(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names) {
  std::shared_ptr<GaugeFamily> f(new GaugeFamily(name, help, Type::kGauge, label_names, {}));
  add(name, label_names, Entry{Type::kGauge, f});
  return *f;
}

HistogramFamily& Registry::histogram_family(const std::string& name, const std::string& help,
                                            std::vector<std::string> label_names,
                                            std::vector<double> bounds) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
      throw Error(ErrorCode::kInvalidArgument,
                  "histogram " + name + ": bucket bounds must be finite and ascending");
  std::shared_ptr<HistogramFamily> f(
      new HistogramFamily(name, help, Type::kHistogram, label_names, std::move(bounds)));
  add(name, label_names, Entry{Type::kHistogram, f});
  return *f;
}

Counter& Registry::counter(const std::string& name, const std::string& help) {
  return counter_family(name, help, {}).with({});
}

Gauge& Registry::gauge(const std::string& name, const std::string& help) {
  return gauge_family(name, help, {}).with({});
}

Histogram& Registry::histogram(const std::string& name, const std::string& help,
                               std::vector<double> bounds) {
  return histogram_family(name, help, {}, std::move(bounds)).with({});
}

void Registry::on_render(std::function<void()> refresh) {
  std::lock_guard<std::mutex> lock(mu_);
  refreshers_.push_back(std::move(refresh));
}

std::string Registry::render() const {
  std::vector<std::function<void()>> refreshers;
  std::vector<Entry> families;
  {
    std::lock_guard<std::mutex> lock(mu_);
    refreshers = refreshers_;
    families = families_;
  }
  for (const auto& r : refreshers) r();
  std::string out;
  for (const auto& e : families) {
    switch (e.type) {
      case Type::kCounter:
        static_cast<const CounterFamily*>(e.family.get())->render(out);
        break;
      case Type::kGauge:
        static_cast<const GaugeFamily*>(e.family.get())->render(out);
        break;
      case Type::kHistogram:
        static_cast<const HistogramFamily*>(e.family.get())->render(out);
        break;
    }
  }
  return out;
}

}  // namespace troupe::metrics
