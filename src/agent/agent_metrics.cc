#include "agent/agent_metrics.h"

namespace troupe::agent {

AgentMetrics::AgentMetrics(const store::HostStore& store)
    : workers_(registry_.gauge_family(
          "troupe_workers", "Workers of this host by state (starting: not ready yet).", {"state"})),
      starts_(
          registry_.counter("troupe_worker_starts_total", "Worker processes started and ready.")),
      start_failures_(
          registry_.counter("troupe_worker_start_failures_total", "Worker starts that failed.")),
      exits_(registry_.counter_family(
          "troupe_worker_exits_total",
          "Worker processes that ended: exited (code 0), failed (other code), killed (signal).",
          {"reason"})),
      heartbeat_rtt_(
          registry_.histogram("troupe_heartbeat_round_trip_seconds",
                              "Time from a heartbeat to the head until its acknowledgement.",
                              metrics::latency_buckets())) {
  workers_.with({"starting"});
  workers_.with({"running"});
  for (const char* reason : {"exited", "failed", "killed"}) exits_.with({reason});
  auto& bytes = registry_.gauge("troupe_object_store_bytes", "Bytes of live store objects.");
  auto& objects = registry_.gauge("troupe_object_store_objects", "Live store objects.");
  auto& capacity =
      registry_.gauge("troupe_object_store_capacity_bytes", "The object store's capacity.");
  registry_.on_render([&store, &bytes, &objects, &capacity] {
    auto usage = store.usage();
    bytes.set(static_cast<double>(usage.bytes));
    objects.set(static_cast<double>(usage.objects));
    capacity.set(static_cast<double>(usage.capacity));
  });
}

std::string AgentMetrics::serve(const std::string& address, int port, const std::string& token) {
  transport::HttpServerOptions o;
  o.address = address;
  o.port = port;
  o.token = token;
  server_ = transport::serve_metrics(registry_, o);
  return server_->address();
}

void AgentMetrics::stop() {
  if (server_) server_->stop();
}

void AgentMetrics::on_start_requested() {
  ++starting_;
  workers_.with({"starting"}).set(static_cast<double>(starting_));
}

void AgentMetrics::on_start_done(bool started) {
  if (starting_ > 0) --starting_;
  workers_.with({"starting"}).set(static_cast<double>(starting_));
  (started ? starts_ : start_failures_).inc();
}

void AgentMetrics::on_exit(const wire::control::WorkerExited& exited) {
  const char* reason = exited.signal ? "killed" : exited.exit_code == 0 ? "exited" : "failed";
  exits_.with({reason}).inc();
}

void AgentMetrics::set_workers(size_t in_table) {
  int64_t running = static_cast<int64_t>(in_table) - starting_;
  workers_.with({"running"}).set(static_cast<double>(running < 0 ? 0 : running));
}

void AgentMetrics::on_heartbeat_round_trip(std::chrono::nanoseconds rtt) {
  heartbeat_rtt_.observe(std::chrono::duration<double>(rtt).count());
}

}  // namespace troupe::agent
