#include "controller/timeline_collect.h"

#include "common/timeline.h"

namespace troupe::internal {

TimelineCollection::TimelineCollection(std::vector<Worker> workers)
    : workers_(std::move(workers)), left_(workers_.size()) {}

void TimelineCollection::connected(size_t i, std::shared_ptr<WorkerClient> client,
                                   const std::string& failure) {
  bool kept = false, start = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Worker& w = workers_[i];
    if (!abandoned_ && !w.ended) {
      if (!client) return end_locked(i, failure);
      w.client = client;
      kept = true;
      start = running_;  // else run() starts it
    }
  }
  if (start)
    begin(i);
  else if (client && !kept)  // too late: nobody would close it
    client->close(Error(ErrorCode::kShutdown, "the timeline collection ended"));
}

const std::vector<TimelineCollection::Worker>& TimelineCollection::run(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = true;
    for (size_t i = 0; i < workers_.size(); ++i)
      if (!workers_[i].client && !workers_[i].awaiting_connection && !workers_[i].ended)
        end_locked(i, "not connected");
  }
  for (size_t i = 0; i < workers_.size(); ++i) begin(i);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return left_ == 0; });
  abandoned_ = true;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    if (w.ended) continue;
    end_locked(i, !w.client                 ? "no connection in time"
                  : w.probes < kClockProbes ? "no answer to the clock probes in time"
                                            : "no answer to the timeline request in time");
  }
  return workers_;
}

void TimelineCollection::close_clients(const Error& reason) {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : workers_)
      if (w.client) clients.push_back(w.client);
  }
  for (const auto& c : clients) c->close(reason);
}

// Starts worker i's chain once it has a client (from run() or connected(), whichever is last).
void TimelineCollection::begin(size_t i) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Worker& w = workers_[i];
    if (w.started || !w.client || w.ended || abandoned_) return;
    w.started = true;
  }
  next(i);
}

// Sends worker i's next request, unless its chain ended or was abandoned.
void TimelineCollection::next(size_t i) {
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
  Future<Value> f =
      client->call(method, Map{},
                   "timeline request " + method + " to worker '" + workers_[i].name + "'", nullptr);
  f.then([self = shared_from_this(), i, probe, sent](const Future<Value>& done) {
    self->on_reply(i, probe, sent, timeline::now_ns(), done);
  });
}

void TimelineCollection::on_reply(size_t i, bool probe, int64_t sent, int64_t received,
                                  const Future<Value>& done) {
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
    const Value* now = reply.is_map() ? reply.find("now_ns") : nullptr;
    if (!now || !now->is_int()) return end_locked(i, "malformed clock probe reply");
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

void TimelineCollection::end_locked(size_t i, const std::string& failure) {
  workers_[i].ended = true;
  workers_[i].failure = failure;
  if (--left_ == 0) cv_.notify_all();
}

std::string timeline_worker_label(const std::string& name, const std::string& group, int64_t rank,
                                  int64_t pid, const std::string& host) {
  std::string label = group.empty() ? name : group + "/" + std::to_string(rank) + " " + name;
  return label + " (pid " + std::to_string(pid) + ") @" + host;
}

void add_collected_timelines(const std::vector<TimelineCollection::Worker>& collected,
                             TraceInput& input, size_t first_track) {
  for (size_t i = 0; i < collected.size(); ++i) {
    const TimelineCollection::Worker& w = collected[i];
    TraceTrack& t = input.tracks[first_track + i];
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
}

}  // namespace troupe::internal
