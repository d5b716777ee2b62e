#include "controller/timeline_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace troupe::internal {
namespace {

using json = nlohmann::json;

constexpr int kOwnThread = 1;     // a worker's calls; the driver's dispatches
constexpr int kDriverThread = 2;  // the driver's view of a worker; the driver's sends

// Where an event goes: its track and thread.
struct Placement {
  size_t track;
  int tid;
};

class TraceBuilder {
 public:
  explicit TraceBuilder(TraceInput& in) : in_(in) {
    for (size_t i = 0; i < in_.tracks.size(); ++i)
      if (!in_.tracks[i].is_driver) by_worker_[{in_.tracks[i].host, in_.tracks[i].pid}] = i;
    // A track for each worker that driver events name but no track has (before any event is
    // placed: tracks do not move afterwards).
    std::vector<TraceTrack> extra;
    for (const auto& track : in_.tracks) {
      if (!track.is_driver) continue;
      for (const auto& e : track.snapshot.events) {
        if (e.pid == 0 || e.cat_view() == "send") continue;
        auto [it, added] = by_worker_.try_emplace(std::pair<int, pid_t>{e.host, e.pid},
                                                  in_.tracks.size() + extra.size());
        if (!added) continue;
        TraceTrack t;
        t.label = "worker pid " + std::to_string(e.pid) + " @host " + std::to_string(e.host);
        t.host = e.host;
        t.pid = e.pid;
        extra.push_back(std::move(t));
      }
    }
    for (auto& t : extra) in_.tracks.push_back(std::move(t));
  }

  json build(TimelineSummary& summary) {
    std::vector<std::pair<Placement, const timeline::Event*>> placed;
    for (size_t t = 0; t < in_.tracks.size(); ++t)
      for (const auto& e : in_.tracks[t].snapshot.events) placed.emplace_back(place(t, e), &e);
    int64_t base = std::numeric_limits<int64_t>::max();
    for (const auto& [p, e] : placed) base = std::min(base, driver_time(p, *e, e->start_ns));
    json events = json::array();
    for (size_t t = 0; t < in_.tracks.size(); ++t) add_metadata(events, t);
    for (const auto& [p, e] : placed) events.push_back(event(p, *e, base));
    summary.recording = in_.recording;
    summary.tracks = in_.tracks.size();
    summary.events = placed.size();
    summary.missing = in_.missing;
    summary.clock_error_us = 0;
    json clocks = json::array();
    json dropped = json::object();
    for (const auto& t : in_.tracks) {
      if (t.collected && !t.is_driver) {
        summary.clock_error_us = std::max(summary.clock_error_us, t.error_ns / 1000.0);
        clocks.push_back({{"track", t.label},
                          {"offset_us", t.offset_ns / 1000.0},
                          {"error_bound_us", t.error_ns / 1000.0}});
      }
      if (t.collected && t.snapshot.dropped > 0) dropped[t.label] = t.snapshot.dropped;
    }
    json other = {
        {"recording", in_.recording},
        {"clock_reference",
         in_.collector + "'s CLOCK_MONOTONIC; ts in microseconds since the first event"},
        {"ts_origin_ns", placed.empty() ? int64_t{0} : base},
        {"clock_alignment",
         "per worker: offset = worker clock - midpoint of " + in_.collector +
             "'s send and receive of a probe, keeping the probe with the shortest round trip; "
             "error bound = half that round trip"},
        {"clock_error_bound_us", summary.clock_error_us},
        {"clocks", clocks},
        {"dropped_events", dropped},
        {"missing", in_.missing}};
    if (!in_.no_driver.empty()) other["driver"] = in_.no_driver;
    return json{{"traceEvents", std::move(events)},
                {"displayTimeUnit", "ns"},
                {"otherData", std::move(other)}};
  }

 private:
  // Driver events that name a worker (pid set) belong to that worker's track, but its sends.
  Placement place(size_t track, const timeline::Event& e) const {
    if (!in_.tracks[track].is_driver) return {track, kOwnThread};
    if (e.cat_view() == "send") return {track, kDriverThread};
    if (e.pid == 0) return {track, kOwnThread};
    return {by_worker_.at(std::pair<int, pid_t>{e.host, e.pid}), kDriverThread};
  }

  // `t` of an event placed at `p`, on the driver's clock.
  int64_t driver_time(const Placement& p, const timeline::Event& e, int64_t t) const {
    const TraceTrack& track = in_.tracks[p.track];
    if (p.tid == kDriverThread || track.is_driver) return t;  // recorded by the driver
    return t - static_cast<int64_t>(track.offset_ns);
  }

  const TraceTrack* worker_track(const timeline::Event& e) const {
    auto it = by_worker_.find(std::pair<int, pid_t>{e.host, e.pid});
    return it == by_worker_.end() ? nullptr : &in_.tracks[it->second];
  }

  json event(const Placement& p, const timeline::Event& e, int64_t base) const {
    const TraceTrack& track = in_.tracks[p.track];
    json out = {{"name", std::string(e.name_view())},
                {"cat", std::string(e.cat_view())},
                {"pid", p.track + 1},
                {"tid", p.tid},
                {"ts", static_cast<double>(driver_time(p, e, e.start_ns) - base) / 1000.0}};
    json args = json::object();
    if (e.kind == timeline::Kind::kSpan) {
      out["ph"] = "X";
      out["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
    } else {
      out["ph"] = "i";
      out["s"] = e.cat_view() == "host" ? "g" : "p";
    }
    std::string_view cat = e.cat_view();
    if (cat == "call") {
      args = {{"method", std::string(e.name_view())},
              {"worker", track.worker},
              {"group", track.group},
              {"rank", track.rank},
              {"args_bytes", e.size}};
    } else if (cat == "dispatch") {
      args = {{"method", std::string(e.name_view())},
              {"group", std::string(e.detail_view())},
              {"workers", e.count}};
    } else if (cat == "send") {
      const TraceTrack* to = worker_track(e);
      args = {{"method", std::string(e.name_view())},
              {"worker", to ? to->label : std::string(e.detail_view())}};
    } else if (!e.detail_view().empty()) {
      args = {{"detail", std::string(e.detail_view())}};
    }
    out["args"] = std::move(args);
    return out;
  }

  void add_metadata(json& events, size_t t) const {
    const TraceTrack& track = in_.tracks[t];
    const int pid = static_cast<int>(t) + 1;
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", track.label}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"args", {{"sort_index", pid}}}});
    const char* own = track.is_driver ? "dispatches" : "calls";
    const char* other = track.is_driver ? "sends" : "seen by the driver";
    for (auto [tid, name] : {std::pair{kOwnThread, own}, std::pair{kDriverThread, other}})
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", tid},
                        {"args", {{"name", name}}}});
  }

  TraceInput& in_;
  std::map<std::pair<int, pid_t>, size_t> by_worker_;  // (host, pid) -> track
};

}  // namespace

std::string chrome_trace_json(TraceInput input, TimelineSummary& summary) {
  TraceBuilder builder(input);
  return builder.build(summary).dump();
}

void write_trace_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out << text;
  if (!out || !out.flush())
    throw Error(ErrorCode::kInvalidArgument,
                "cannot write the timeline to '" + path + "': " + std::strerror(errno));
}

}  // namespace troupe::internal
