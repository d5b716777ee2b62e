#include "head/head_metrics.h"

namespace troupe::head {

HeadMetrics::HeadMetrics(Head& head)
    : head_(head),
      hosts_(registry_.gauge_family(
          "troupe_hosts",
          "Hosts by state: up (agent connected), lost (its agent's connection closed or its "
          "heartbeats stopped), expected (named but never registered).",
          {"state"})),
      registrations_(registry_.counter("troupe_agent_registrations_total",
                                       "Agent registrations the head accepted.")),
      lost_(registry_.counter("troupe_host_losses_total",
                              "Times a registered host's agent was lost or left.")),
      placement_groups_(
          registry_.gauge("troupe_placement_groups", "Placement groups reserved on the head.")),
      heartbeat_rtt_(registry_.histogram("troupe_heartbeat_round_trip_seconds",
                                         "Time from a heartbeat to an agent until its "
                                         "acknowledgement.",
                                         metrics::latency_buckets())) {
  for (const char* state : {"up", "lost", "expected"}) hosts_.with({state});
  registry_.on_render([this] { refresh(); });
  head_.set_heartbeat_round_trip([h = &heartbeat_rtt_](std::chrono::nanoseconds rtt) {
    h->observe(std::chrono::duration<double>(rtt).count());
  });
}

void HeadMetrics::refresh() {
  size_t up = 0, lost = 0, expected = 0;
  for (const auto& h : head_.hosts()) {
    if (!h.registered)
      ++expected;
    else if (h.alive)
      ++up;
    else
      ++lost;
  }
  hosts_.with({"up"}).set(static_cast<double>(up));
  hosts_.with({"lost"}).set(static_cast<double>(lost));
  hosts_.with({"expected"}).set(static_cast<double>(expected));
  placement_groups_.set(static_cast<double>(head_.placement_groups().size()));
  std::lock_guard<std::mutex> lock(refresh_mu_);
  if (uint64_t n = head_.registrations(); n > registrations_.value())
    registrations_.inc(n - registrations_.value());
  if (uint64_t n = head_.hosts_lost(); n > lost_.value()) lost_.inc(n - lost_.value());
}

std::string HeadMetrics::serve(const std::string& address, int port, const std::string& token) {
  transport::HttpServerOptions o;
  o.address = address;
  o.port = port;
  o.token = token;
  server_ = transport::serve_metrics(registry_, o);
  return server_->address();
}

void HeadMetrics::stop() {
  if (server_) server_->stop();
}

}  // namespace troupe::head
