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

// One request to each of `clients` (null: skipped) at once, answered or not by `deadline`.
struct Replies {
  struct Reply {
    int64_t sent_ns = 0, received_ns = 0;
    bool done = false;
    std::optional<Value> value;
    std::optional<Error> error;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Reply> replies;
  size_t left = 0;
};

std::shared_ptr<Replies> ask_all(const std::vector<std::shared_ptr<WorkerClient>>& clients,
                                 const std::vector<std::string>& names, const std::string& method,
                                 Clock::time_point deadline) {
  auto r = std::make_shared<Replies>();
  r->replies.resize(clients.size());
  for (const auto& c : clients) r->left += c ? 1 : 0;
  for (size_t i = 0; i < clients.size(); ++i) {
    if (!clients[i]) continue;
    {
      std::lock_guard<std::mutex> lock(r->mu);
      r->replies[i].sent_ns = timeline::now_ns();
    }
    Future<Value> f = clients[i]->call(
        method, Map{}, "timeline request " + method + " to worker '" + names[i] + "'", nullptr);
    f.then([r, i](const Future<Value>& done) {
      const int64_t now = timeline::now_ns();
      std::lock_guard<std::mutex> lock(r->mu);
      auto& reply = r->replies[i];
      reply.received_ns = now;
      reply.done = true;
      if (auto e = done.error())
        reply.error = *e;
      else
        reply.value = done.get();
      if (--r->left == 0) r->cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(r->mu);
  r->cv.wait_until(lock, deadline, [&] { return r->left == 0; });
  return r;
}

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
  std::vector<std::shared_ptr<WorkerClient>> clients;
  std::vector<std::string> names;
  for (const auto& w : live) {
    TraceTrack t;
    t.worker = w->name();
    t.group = w->group;
    t.rank = w->rank;
    t.host = static_cast<int>(w->host());
    t.pid = w->pid();
    t.label = worker_label(t.worker, t.group, t.rank, t.pid, w->host_name());
    t.error_ns = -1;  // no probe answered yet
    input.tracks.push_back(std::move(t));
    clients.push_back(w->client());
    names.push_back(w->name());
    if (!clients.back()) input.missing.push_back(w->name() + ": not connected");
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

  auto give_up = [&](size_t i, const std::string& why) {
    input.missing.push_back(names[i] + ": " + why);
    clients[i] = nullptr;
  };
  auto failed = [&](size_t i, const Replies::Reply& reply, const char* what) {
    if (!reply.done) return give_up(i, std::string("no answer to ") + what + " in time"), true;
    if (reply.error) return give_up(i, reply.error->message()), true;
    return false;
  };
  for (int probe = 0; probe < kClockProbes; ++probe) {
    auto r = ask_all(clients, names, "__clock__", deadline);
    std::lock_guard<std::mutex> lock(r->mu);
    for (size_t i = 0; i < clients.size(); ++i) {
      if (!clients[i]) continue;
      const auto& reply = r->replies[i];
      if (failed(i, reply, "the clock probe")) continue;
      const Value* now = nullptr;
      for (const auto& [k, v] : reply.value->as_map())
        if (k == "now_ns" && v.is_int()) now = &v;
      if (!now) {
        give_up(i, "malformed clock probe reply");
        continue;
      }
      TraceTrack& t = input.tracks[i + 1];
      double error = static_cast<double>(reply.received_ns - reply.sent_ns) / 2;
      if (t.error_ns < 0 || error < t.error_ns) {
        t.error_ns = error;
        t.offset_ns =
            static_cast<double>(now->as_int()) -
            (static_cast<double>(reply.sent_ns) + static_cast<double>(reply.received_ns)) / 2;
      }
    }
  }
  auto r = ask_all(clients, names, "__timeline__", deadline);
  {
    std::lock_guard<std::mutex> lock(r->mu);
    for (size_t i = 0; i < clients.size(); ++i) {
      if (!clients[i]) continue;
      const auto& reply = r->replies[i];
      if (failed(i, reply, "the timeline request")) continue;
      try {
        input.tracks[i + 1].snapshot = timeline::from_value(*reply.value);
        input.tracks[i + 1].collected = true;
      } catch (const Error& e) {
        give_up(i, e.message());
      }
    }
  }
  for (auto& t : input.tracks)
    if (t.error_ns < 0) t.error_ns = 0;
  // Last: a call's completion callbacks (a dispatch's span) run on the I/O thread after its
  // waiters wake, and before the I/O thread read the replies above. The recorder is the
  // process's: a driver whose cluster records nothing shows none of it.
  if (record_timeline_) input.tracks[0].snapshot = timeline::snapshot();

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
