// ClusterImpl::timeline: collects the driver's and every live worker's timeline events over the
// workers' connections, aligns the workers' clocks with the driver's, and writes the Chrome trace
// (timeline_trace.h).
//
// Clock alignment and the collection from the workers: timeline_collect.h.
#include <unistd.h>

#include "common/timeline.h"
#include "controller/cluster_impl.h"
#include "controller/timeline_collect.h"
#include "controller/timeline_trace.h"

namespace troupe::internal {
namespace {

std::string local_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

TimelineSummary ClusterImpl::timeline(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  TraceInput input;
  input.recording = record_timeline_;
  TraceTrack driver;
  driver.is_driver = true;
  driver.label = "driver (pid " + std::to_string(::getpid()) + ") @" + local_host_name();
  driver.collected = true;
  input.tracks.push_back(std::move(driver));  // its snapshot is taken last (below)

  std::vector<std::shared_ptr<WorkerState>> live;
  Array dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, w] : workers_) live.push_back(w);
    dead.assign(dead_.begin(), dead_.end());
  }
  std::vector<TimelineCollection::Worker> asked;
  for (const auto& w : live) {
    TraceTrack t;
    t.worker = w->name();
    t.group = w->group;
    t.rank = w->rank;
    t.host = static_cast<int>(w->host());
    t.pid = w->pid();
    t.label = timeline_worker_label(t.worker, t.group, t.rank, t.pid, w->host_name());
    input.tracks.push_back(std::move(t));
    TimelineCollection::Worker asking;
    asking.client = w->client();
    asking.name = w->name();
    asked.push_back(std::move(asking));
  }
  // Dead workers keep a track for the driver's events about them (their own died with them).
  std::vector<HostInfo> host_list = hosts();
  for (const auto& entry : dead) {
    auto field = [&](const char* k) -> const Value* {
      for (const auto& [key, v] : entry.as_map())
        if (key == k) return &v;
      return nullptr;
    };
    TraceTrack t;
    t.worker = field("name")->as_string();
    t.group = field("group")->as_string();
    t.rank = static_cast<int>(field("rank")->as_int());
    t.pid = static_cast<pid_t>(field("pid")->as_int());
    const std::string& host_name = field("host")->as_string();
    for (const auto& h : host_list)
      if (h.name == host_name) t.host = static_cast<int>(h.index);
    t.label = timeline_worker_label(t.worker, t.group, t.rank, t.pid, host_name) + " (dead)";
    input.tracks.push_back(std::move(t));
  }

  auto collection = std::make_shared<TimelineCollection>(std::move(asked));
  add_collected_timelines(collection->run(deadline), input, 1);
  // Last: a call's completion callbacks (a dispatch's span) run on the I/O thread after its
  // waiters wake, and before the I/O thread read the replies above. The recorder is the
  // process's, shared by every cluster of this driver: this cluster's events are those with its
  // scope, and a cluster that records nothing shows none.
  if (record_timeline_) {
    timeline::Snapshot mine = timeline::snapshot();
    std::erase_if(mine.events,
                  [&](const timeline::Event& e) { return e.scope != timeline_scope_; });
    input.tracks[0].snapshot = std::move(mine);
  }

  TimelineSummary summary;
  std::string text = chrome_trace_json(std::move(input), summary);
  write_trace_file(path, text);
  return summary;
}

}  // namespace troupe::internal

namespace troupe {

TimelineSummary Cluster::timeline(const std::string& path, std::chrono::milliseconds timeout) {
  return impl_->timeline(path, timeout);
}

}  // namespace troupe
