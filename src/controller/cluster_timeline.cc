// ClusterImpl::timeline: collects the driver's and every live worker's timeline events over the
// workers' connections, aligns the workers' clocks with the driver's, and writes the Chrome trace
// (timeline_trace.h).
//
// Clock alignment: the driver sends kClockProbes "__clock__" requests to each worker, one after
// the other (all workers at once), each answered with the worker's CLOCK_MONOTONIC. With t0 and
// t3 the driver's clock at the send and at the reply, and t the worker's, the worker's offset is
// t - (t0 + t3) / 2, wrong by at most (t3 - t0) / 2 (the reply was read somewhere in between);
// the probe with the shortest round trip is kept.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>

#include "common/timeline.h"
#include "controller/cluster_impl.h"
#include "controller/timeline_trace.h"

namespace troupe::internal {
namespace {

constexpr int kClockProbes = 5;
using Clock = std::chrono::steady_clock;

// Collects from every worker at once: each worker's kClockProbes clock probes, then its
// events, one request after the other's reply (the next is sent from the reply's callback, on
// the I/O thread), independently of the other workers. The driver waits until every chain ended
// or the deadline; a chain that has not ended by then is abandoned (sends nothing more).
class Collection : public std::enable_shared_from_this<Collection> {
 public:
  struct Worker {
    std::shared_ptr<WorkerClient> client;
    std::string name;
    int probes = 0;
    double offset_ns = 0, error_ns = -1;  // the best probe so far (-1: none)
    std::optional<Value> events;          // the __timeline__ reply
    std::string failure;                  // why the chain ended without events
    bool ended = false;
  };

  explicit Collection(std::vector<Worker> workers) : workers_(std::move(workers)) {}

  // Starts every chain and waits until all ended or `deadline`; the result stays valid after.
  const std::vector<Worker>& run(Clock::time_point deadline) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!workers_[i].client) end_locked(i, "not connected");
    }
    for (size_t i = 0; i < workers_.size(); ++i) next(i);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [&] { return left_ == 0; });
    abandoned_ = true;
    for (size_t i = 0; i < workers_.size(); ++i)
      if (!workers_[i].ended)
        end_locked(i, workers_[i].probes < kClockProbes
                          ? "no answer to the clock probes in time"
                          : "no answer to the timeline request in time");
    return workers_;
  }

 private:
  // Sends worker i's next request, unless its chain ended or was abandoned.
  void next(size_t i) {
    std::shared_ptr<WorkerClient> client;
    bool probe = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abandoned_ || workers_[i].ended) return;
      client = workers_[i].client;
      probe = workers_[i].probes < kClockProbes;
    }
    const std::string method = probe ? "__clock__" : "__timeline__";
    const int64_t sent = timeline::now_ns();
    Future<Value> f = client->call(
        method, Map{}, "timeline request " + method + " to worker '" + workers_[i].name + "'",
        nullptr);
    f.then([self = shared_from_this(), i, probe, sent](const Future<Value>& done) {
      self->on_reply(i, probe, sent, timeline::now_ns(), done);
    });
  }

  void on_reply(size_t i, bool probe, int64_t sent, int64_t received, const Future<Value>& done) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Worker& w = workers_[i];
      if (w.ended) return;
      if (auto e = done.error()) return end_locked(i, e->message());
      Value reply = done.get();
      if (!probe) {
        w.events = std::move(reply);
        return end_locked(i, "");
      }
      const Value* now = nullptr;
      if (reply.is_map())
        for (const auto& [k, v] : reply.as_map())
          if (k == "now_ns" && v.is_int()) now = &v;
      if (!now) return end_locked(i, "malformed clock probe reply");
      const double error = static_cast<double>(received - sent) / 2;
      if (w.error_ns < 0 || error < w.error_ns) {
        w.error_ns = error;
        w.offset_ns = static_cast<double>(now->as_int()) -
                      (static_cast<double>(sent) + static_cast<double>(received)) / 2;
      }
      ++w.probes;
    }
    next(i);
  }

  void end_locked(size_t i, const std::string& failure) {
    workers_[i].ended = true;
    workers_[i].failure = failure;
    if (--left_ == 0) cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Worker> workers_;
  size_t left_ = workers_.size();
  bool abandoned_ = false;
};

std::string local_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string worker_label(const std::string& name, const std::string& group, int64_t rank,
                         int64_t pid, const std::string& host) {
  std::string label = group.empty() ? name : group + "/" + std::to_string(rank) + " " + name;
  return label + " (pid " + std::to_string(pid) + ") @" + host;
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
  std::vector<Collection::Worker> asked;
  for (const auto& w : live) {
    TraceTrack t;
    t.worker = w->name();
    t.group = w->group;
    t.rank = w->rank;
    t.host = static_cast<int>(w->host());
    t.pid = w->pid();
    t.label = worker_label(t.worker, t.group, t.rank, t.pid, w->host_name());
    input.tracks.push_back(std::move(t));
    Collection::Worker asking;
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
    t.label = worker_label(t.worker, t.group, t.rank, t.pid, host_name) + " (dead)";
    input.tracks.push_back(std::move(t));
  }

  auto collection = std::make_shared<Collection>(std::move(asked));
  const auto& collected = collection->run(deadline);
  for (size_t i = 0; i < collected.size(); ++i) {
    const Collection::Worker& w = collected[i];
    TraceTrack& t = input.tracks[i + 1];
    if (!w.events) {
      input.missing.push_back(w.name + ": " + w.failure);
      continue;
    }
    try {
      t.snapshot = timeline::from_value(*w.events);
      t.collected = true;
      t.offset_ns = w.offset_ns;
      t.error_ns = w.error_ns;
    } catch (const Error& e) {
      input.missing.push_back(w.name + ": " + e.message());
    }
  }
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
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out << text;
  if (!out || !out.flush())
    throw Error(ErrorCode::kInvalidArgument,
                "cannot write the timeline to '" + path + "': " + std::strerror(errno));
  return summary;
}

}  // namespace troupe::internal

namespace troupe {

TimelineSummary Cluster::timeline(const std::string& path, std::chrono::milliseconds timeout) {
  return impl_->timeline(path, timeout);
}

}  // namespace troupe
