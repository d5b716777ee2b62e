// What an agent serves on /metrics (AgentConfig::metrics_port): its workers by state, worker
// starts and exits, its object store's usage and the round trips of its heartbeats to the head.
//
// Threads: the on_* functions are called on the agent's I/O thread; every update is an atomic
// store or add, so the HTTP server's threads render concurrently. The object store is read at
// each scrape (HostStore is thread-safe); it must outlive stop().
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "store/host_store.h"
#include "transport/http_server.h"
#include "wire/control.h"

namespace troupe::agent {

class AgentMetrics {
 public:
  explicit AgentMetrics(const store::HostStore& store);
  ~AgentMetrics() { stop(); }

  // Serves /metrics on ADDRESS:PORT (port 0: any) for bearers of `token`; returns the bound
  // "ADDRESS:PORT". Throws Error(kInvalidArgument) when it cannot bind.
  std::string serve(const std::string& address, int port, const std::string& token);
  void stop();

  void on_start_requested();
  void on_start_done(bool started);
  void on_exit(const wire::control::WorkerExited& exited);
  // Workers the table holds (starting or running, not reaped).
  void set_workers(size_t in_table);
  void on_heartbeat_round_trip(std::chrono::nanoseconds rtt);

  const metrics::Registry& registry() const { return registry_; }

 private:
  metrics::Registry registry_;
  metrics::GaugeFamily& workers_;
  metrics::Counter& starts_;
  metrics::Counter& start_failures_;
  metrics::CounterFamily& exits_;
  metrics::Histogram& heartbeat_rtt_;
  int64_t starting_ = 0;  // I/O thread
  std::unique_ptr<transport::HttpServer> server_;
};

}  // namespace troupe::agent
