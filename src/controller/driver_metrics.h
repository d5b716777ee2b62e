// What a driver serves on /metrics (ClusterOptions::metrics_port): calls by method and worker
// group (started, finished, failed, latency), bytes sent, worker restarts and live workers.
//
// Cost (the call path runs up to 150,000 calls/s): a call looks its MethodMetrics up once per
// worker and method (WorkerState keeps them under the lock it takes anyway), then costs one
// atomic add when sent and four when it completes (a counter and the latency histogram's
// bucket, sum and count), plus the continuation that observes the completion. With metrics off
// (the default) a call costs one null check.
// Threads: everything is thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/metrics.h"
#include "transport/http_server.h"

namespace troupe::internal {

// The metrics of one (method, group). Valid as long as the DriverMetrics.
struct MethodMetrics {
  metrics::Counter& started;
  metrics::Counter& finished;  // completed with a value
  metrics::Counter& failed;    // completed with an error
  metrics::Histogram& latency;
};

class DriverMetrics {
 public:
  // `workers_alive` is read at each scrape (thread-safe).
  explicit DriverMetrics(std::function<size_t()> workers_alive);
  ~DriverMetrics() { stop(); }

  // Serves /metrics on ADDRESS:PORT (port 0: any) for bearers of `token`; returns the bound
  // "ADDRESS:PORT". Throws Error(kInvalidArgument) when it cannot bind.
  std::string serve(const std::string& address, int port, const std::string& token);
  void stop();

  // The metrics of calls of `method` to workers of `group` ("" outside a group). Takes a lock:
  // look each pair up once and keep the pointer.
  MethodMetrics* of(const std::string& method, const std::string& group);
  void on_restart(const std::string& group) { restarts_.with({group}).inc(); }

  const metrics::Registry& registry() const { return registry_; }

 private:
  metrics::Registry registry_;
  metrics::CounterFamily& started_;
  metrics::CounterFamily& finished_;
  metrics::CounterFamily& failed_;
  metrics::HistogramFamily& latency_;
  metrics::CounterFamily& restarts_;
  metrics::Counter& bytes_sent_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<MethodMetrics>> methods_;
  std::unique_ptr<transport::HttpServer> server_;
};

}  // namespace troupe::internal
