// What a standing head serves on /metrics (`troupe start --head --metrics-port`): hosts by state,
// registrations and losses, placement groups, and the round trips of its heartbeats to agents.
//
// Threads: values are read from the Head (thread-safe) at each scrape; heartbeat round trips
// are observed on the head's I/O thread. The Head must outlive stop().
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/metrics.h"
#include "head/head.h"
#include "transport/http_server.h"

namespace troupe::head {

class HeadMetrics {
 public:
  // Registers the head's metrics and its heartbeat observer (for agents registering later).
  explicit HeadMetrics(Head& head);
  ~HeadMetrics() { stop(); }

  // Serves /metrics on ADDRESS:PORT (port 0: any) for bearers of `token`; returns the bound
  // "ADDRESS:PORT". Throws Error(kInvalidArgument) when it cannot bind.
  std::string serve(const std::string& address, int port, const std::string& token);
  void stop();
  const metrics::Registry& registry() const { return registry_; }

 private:
  void refresh();  // from the head, before each render

  Head& head_;
  metrics::Registry registry_;
  metrics::GaugeFamily& hosts_;
  metrics::Counter& registrations_;
  metrics::Counter& lost_;
  metrics::Gauge& placement_groups_;
  metrics::Histogram& heartbeat_rtt_;
  std::mutex refresh_mu_;  // counters catch up with the head's totals one scrape at a time
  std::unique_ptr<transport::HttpServer> server_;
};

}  // namespace troupe::head
