#include "controller/driver_metrics.h"

#include "transport/connection.h"

namespace troupe::internal {

DriverMetrics::DriverMetrics(std::function<size_t()> workers_alive)
    : started_(registry_.counter_family("troupe_calls_started_total",
                                        "Method calls this driver made.", {"method", "group"})),
      finished_(registry_.counter_family("troupe_calls_finished_total",
                                         "Method calls that returned a value.",
                                         {"method", "group"})),
      failed_(registry_.counter_family("troupe_calls_failed_total",
                                       "Method calls that failed (any error: the method raised, "
                                       "the worker died, ...).",
                                       {"method", "group"})),
      latency_(
          registry_.histogram_family("troupe_call_latency_seconds",
                                     "Time from making a call until its result or error arrived.",
                                     {"method", "group"}, metrics::latency_buckets())),
      restarts_(registry_.counter_family(
          "troupe_worker_restarts_total",
          "Workers of a group restarted by its restart policy (new incarnations running).",
          {"group"})),
      bytes_sent_(registry_.counter("troupe_bytes_sent_total",
                                    "Bytes this driver wrote to its connections (all frames).")) {
  auto& alive = registry_.gauge("troupe_driver_workers", "Workers of this driver not dead yet.");
  registry_.on_render([this, &alive, workers_alive = std::move(workers_alive)] {
    alive.set(static_cast<double>(workers_alive()));
    std::lock_guard<std::mutex> lock(mu_);  // one catch-up at a time
    uint64_t sent = transport::bytes_sent_total();
    if (sent > bytes_sent_.value()) bytes_sent_.inc(sent - bytes_sent_.value());
  });
}

std::string DriverMetrics::serve(const std::string& address, int port, const std::string& token) {
  transport::HttpServerOptions o;
  o.address = address;
  o.port = port;
  o.token = token;
  server_ = transport::serve_metrics(registry_, o);
  return server_->address();
}

void DriverMetrics::stop() {
  if (server_) server_->stop();
}

MethodMetrics* DriverMetrics::of(const std::string& method, const std::string& group) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& m = methods_[{method, group}];
  if (!m)
    m.reset(new MethodMetrics{started_.with({method, group}), finished_.with({method, group}),
                              failed_.with({method, group}), latency_.with({method, group})});
  return m.get();
}

}  // namespace troupe::internal
