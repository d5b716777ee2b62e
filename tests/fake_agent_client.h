// An agent in memory for unit tests of the controller (the fake beside AgentClient, see
// src/controller/agent_client.h), and FakeAgents, a connector that hands them out.
//
// A FakeAgentClient records every request and answers at once with typed replies encoded as the
// real agent encodes them (so the controller's decoders run): ports counted up from the range's
// start, release counts, "exit code 0" for stops, the host's GPU lines. Starts are answered with
// `start_reply` (or what `reply_for` makes of the request, when set) unless `hold_starts` is set,
// in which case they stay pending until close().
// close() does what a lost connection does: pending replies fail with the reason, then the
// events' on_closed runs, on the calling thread.
//
// Threads: thread-safe; callbacks run on the thread that calls the function triggering them.
#pragma once

#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/future_state.h"
#include "controller/agent_client.h"

namespace troupe_test {

namespace control = troupe::wire::control;

class FakeAgentClient : public troupe::internal::AgentClient {
 public:
  FakeAgentClient(size_t host, std::string endpoint, troupe::internal::AgentEvents events)
      : host_(host), endpoint_(std::move(endpoint)), events_(std::move(events)) {}

  // ---- knobs (set before the controller uses the agent) ----
  bool hold_starts = false;
  control::StartWorkerReply start_reply{4242, 0, "unix:/fake/no-such-worker.sock", "", {}, ""};
  std::function<control::StartWorkerReply(const control::StartWorker&)> reply_for;

  // ---- what the controller asked ----
  std::vector<control::StartWorker> starts() const { return locked(starts_); }
  std::vector<control::StopWorker> stops() const { return locked(stops_); }
  std::vector<control::ReservePorts> port_requests() const { return locked(port_requests_); }
  std::vector<control::ReleasePorts> port_releases() const { return locked(port_releases_); }
  // Ports held now, by owner.
  std::map<std::string, std::vector<int>> held_ports() const { return locked(held_); }

  // The agent reports a worker's exit (as its worker_exited event).
  void report_exit(control::WorkerExited exited) {
    if (events_.on_worker_exited) events_.on_worker_exited(std::move(exited));
  }

  troupe::internal::AgentReply<control::StartWorkerReply> start_worker(
      const control::StartWorker& request, std::string context) override {
    std::lock_guard<std::mutex> lock(mu_);
    starts_.push_back(request);
    if (closed_) return {failed(), &control::StartWorkerReply::from};
    if (hold_starts) {
      auto state = std::make_shared<troupe::internal::FutureState>(std::move(context));
      pending_.push_back(state);
      return {troupe::internal::FutureAccess::make(state), &control::StartWorkerReply::from};
    }
    return {troupe::make_ready_future((reply_for ? reply_for(request) : start_reply).to_value()),
            &control::StartWorkerReply::from};
  }
  troupe::internal::AgentReply<control::StopWorkerReply> stop_worker(
      const control::StopWorker& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    stops_.push_back(request);
    if (closed_) return {failed(), &control::StopWorkerReply::from};
    return {troupe::make_ready_future(control::StopWorkerReply{"exit code 0"}.to_value()),
            &control::StopWorkerReply::from};
  }
  troupe::internal::AgentReply<std::vector<int>> reserve_ports(
      const control::ReservePorts& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    port_requests_.push_back(request);
    if (closed_) return {failed(), &control::ReservePorts::reply_from};
    std::vector<int> ports;
    for (int p = request.lo; p < request.hi && static_cast<int>(ports.size()) < request.count; ++p)
      if (!taken_.count(p)) ports.push_back(p);
    if (static_cast<int>(ports.size()) < request.count)
      return {troupe::make_failed_future(
                  troupe::Error(troupe::ErrorCode::kResourceUnavailable, "no free port")),
              &control::ReservePorts::reply_from};
    for (int p : ports) taken_.insert(p), held_[request.owner].push_back(p);
    return {troupe::make_ready_future(control::ReservePorts::reply(ports)),
            &control::ReservePorts::reply_from};
  }
  troupe::internal::AgentReply<int64_t> release_ports(
      const control::ReleasePorts& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    port_releases_.push_back(request);
    if (closed_) return {failed(), &control::ReleasePorts::reply_from};
    int64_t n = 0;
    if (auto it = held_.find(request.owner); it != held_.end()) {
      for (int p : it->second) taken_.erase(p), ++n;
      held_.erase(it);
    }
    return {troupe::make_ready_future(control::ReleasePorts::reply(n)),
            &control::ReleasePorts::reply_from};
  }
  troupe::internal::AgentReply<std::vector<std::string>> gpu_state(
      const control::GpuState& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return {failed(), &control::GpuState::reply_from};
    std::vector<std::string> lines;
    for (int g : request.gpus) lines.push_back("GPU " + std::to_string(g) + ": idle");
    return {troupe::make_ready_future(control::GpuState::reply(lines)),
            &control::GpuState::reply_from};
  }
  // No processes to sample: every named worker is reported as not sampled.
  troupe::internal::AgentReply<control::DumpStacksReply> dump_stacks(
      const control::DumpStacks& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return {failed(), &control::DumpStacksReply::from};
    control::DumpStacksReply reply;
    for (const auto& name : request.names) {
      control::WorkerStacks w;
      w.name = name;
      w.errors.push_back("a fake agent has no stacks");
      reply.workers.push_back(w);
    }
    return {troupe::make_ready_future(reply.to_value()), &control::DumpStacksReply::from};
  }
  troupe::internal::AgentReply<control::MemoryReply> memory() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return {failed(), &control::MemoryReply::from};
    return {troupe::make_ready_future(
                control::MemoryReply{int64_t{16} << 30, int64_t{8} << 30, {}}.to_value()),
            &control::MemoryReply::from};
  }
  // Object store: names "troupe-<this pid>-<hex>" accounted against store_capacity; no files.
  int64_t store_capacity = int64_t{1} << 30;
  std::map<std::string, int64_t> store_objects() const { return locked(store_objects_); }
  troupe::internal::AgentReply<std::string> store_reserve(int64_t size) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return {failed(), &control::StoreReserve::reply_from};
    int64_t used = 0;
    for (const auto& [n, s] : store_objects_) used += s;
    if (size > store_capacity - used)
      return {troupe::make_failed_future(
                  troupe::Error(troupe::ErrorCode::kOutOfMemory, "fake store is full")),
              &control::StoreReserve::reply_from};
    std::string name = "troupe-" + std::to_string(::getpid()) + "-" +
                       std::string(32 - std::to_string(next_object_).size(), '0') +
                       std::to_string(next_object_);
    ++next_object_;
    store_objects_[name] = size;
    return {troupe::make_ready_future(control::StoreReserve::reply(name)),
            &control::StoreReserve::reply_from};
  }
  // Accounted like a reservation (no file is written); store_puts() counts them.
  troupe::internal::AgentReply<std::string> store_put(const troupe::Bytes& data) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++store_puts_;
    }
    return store_reserve(static_cast<int64_t>(data.size()));
  }
  int store_puts() const { return locked(store_puts_); }
  troupe::internal::AgentReply<troupe::Value> store_free(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    bool had = store_objects_.erase(name) > 0;
    return {troupe::make_ready_future(troupe::Value(had)),
            [](const troupe::Value& v) { return v; }};
  }
  troupe::internal::AgentReply<control::StoreUsage> store_usage() override {
    std::lock_guard<std::mutex> lock(mu_);
    control::StoreUsage u;
    u.objects = static_cast<int64_t>(store_objects_.size());
    for (const auto& [n, s] : store_objects_) u.bytes += s;
    u.capacity = store_capacity;
    return {troupe::make_ready_future(u.to_value()), &control::StoreUsage::from};
  }
  troupe::internal::AgentReply<troupe::Value> shutdown() override {
    return {troupe::make_ready_future(troupe::Value()), [](const troupe::Value& v) { return v; }};
  }

  void close(const troupe::Error& reason) override {
    std::vector<std::shared_ptr<troupe::internal::FutureState>> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      reason_ = reason;
      pending.swap(pending_);
    }
    for (auto& p : pending) p->set_error(reason);
    if (events_.on_closed) events_.on_closed(this, reason);
  }
  bool closed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  std::string endpoint() const override { return endpoint_; }
  std::chrono::steady_clock::time_point last_heard() const override { return last_heard_at; }
  // What last_heard() returns (default: long ago, as for an agent that went silent).
  std::chrono::steady_clock::time_point last_heard_at{};
  size_t host() const { return host_; }

 private:
  template <typename T>
  T locked(const T& v) const {
    std::lock_guard<std::mutex> lock(mu_);
    return v;
  }
  troupe::Future<troupe::Value> failed() const {
    return troupe::make_failed_future(
        reason_ ? *reason_
                : troupe::Error(troupe::ErrorCode::kConnectionLost, endpoint_ + " is closed"));
  }

  const size_t host_;
  const std::string endpoint_;
  const troupe::internal::AgentEvents events_;
  mutable std::mutex mu_;
  bool closed_ = false;
  std::optional<troupe::Error> reason_;
  std::vector<std::shared_ptr<troupe::internal::FutureState>> pending_;
  std::vector<control::StartWorker> starts_;
  std::vector<control::StopWorker> stops_;
  std::vector<control::ReservePorts> port_requests_;
  std::vector<control::ReleasePorts> port_releases_;
  std::set<int> taken_;
  std::map<std::string, std::vector<int>> held_;
  std::map<std::string, int64_t> store_objects_;
  int next_object_ = 0;
  int store_puts_ = 0;
};

// Hands out FakeAgentClients as ClusterImpl connects to agents, and remembers them.
// Thread-safe.
class FakeAgents {
 public:
  // The connector to give ClusterImpl. `this` must outlive the cluster.
  troupe::internal::AgentConnector connector() {
    return [this](size_t host, const troupe::internal::AgentConnectOptions& options,
                  troupe::internal::AgentEvents events)
               -> std::shared_ptr<troupe::internal::AgentClient> {
      std::lock_guard<std::mutex> lock(mu_);
      dialed_.push_back(options.endpoint);
      if (auto it = refused_.find(host); it != refused_.end()) throw it->second;
      auto client = std::make_shared<FakeAgentClient>(host, options.endpoint, std::move(events));
      if (configure_) configure_(*client);
      agents_[host] = client;
      return client;
    };
  }
  // Connections to `host` fail with `error` from now on.
  void refuse(size_t host, troupe::Error error) {
    std::lock_guard<std::mutex> lock(mu_);
    refused_.insert_or_assign(host, std::move(error));
  }
  // Applied to every client before it is handed out.
  void configure(std::function<void(FakeAgentClient&)> f) {
    std::lock_guard<std::mutex> lock(mu_);
    configure_ = std::move(f);
  }
  // The latest client of `host`, or null.
  std::shared_ptr<FakeAgentClient> agent(size_t host) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(host);
    return it == agents_.end() ? nullptr : it->second;
  }
  // Every endpoint dialed, in order.
  std::vector<std::string> dialed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dialed_;
  }

 private:
  mutable std::mutex mu_;
  std::map<size_t, std::shared_ptr<FakeAgentClient>> agents_;
  std::map<size_t, troupe::Error> refused_;
  std::vector<std::string> dialed_;
  std::function<void(FakeAgentClient&)> configure_;
};

}  // namespace troupe_test
