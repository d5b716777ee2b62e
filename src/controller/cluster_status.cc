// ClusterImpl: what the driver reports about its cluster (hosts, memory, `troupe status`).
#include "common/log.h"
#include "controller/cluster_impl.h"
#include "wire/control.h"

namespace troupe::internal {

namespace control = wire::control;

std::vector<HostMemory> ClusterImpl::host_memory(std::chrono::milliseconds timeout) const {
  using MemoryAnswer = AgentReply<control::MemoryReply>;
  std::vector<MemoryAnswer> answers;
  std::vector<AgentProcess> agents;
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    agents = agents_;
  }
  for (const auto& a : agents)
    answers.push_back(
        a.client && !a.client->closed()
            ? a.client->memory()
            : MemoryAnswer(make_failed_future(Error(ErrorCode::kConnectionLost, "gone")),
                           &control::MemoryReply::from));
  auto deadline = Clock::now() + timeout;
  std::vector<HostMemory> out;
  for (size_t i = 0; i < agents.size(); ++i) {
    if (!answers[i].wait_until(deadline) || answers[i].raw().error()) continue;
    control::MemoryReply reply;
    try {
      reply = answers[i].get(std::chrono::milliseconds(0));
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << "memory of " << agents[i].host_name << ": " << e.message();
      continue;
    }
    HostMemory m;
    m.host = agents[i].host_name;
    m.total_bytes = reply.total_bytes;
    m.available_bytes = reply.available_bytes;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& g : groups_) m.group_bytes[g] = 0;
    for (const auto& [name, bytes] : reply.workers) {
      auto it = workers_.find(user_name(name));
      if (it == workers_.end() || !groups_.count(it->second->group)) continue;
      m.group_bytes[it->second->group] += bytes;
    }
    out.push_back(std::move(m));
  }
  return out;
}

Value ClusterImpl::status() const {
  Array hosts;
  auto memory = host_memory(std::chrono::seconds(10));
  std::vector<std::string> free;
  try {
    free = head_client_->describe_free();
  } catch (const Error& e) {
    TROUPE_LOG(Warning) << "status: " << e.message();
  }
  std::vector<std::string> tcp_endpoints;  // for tools that ask the agents (`troupe logs`)
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    for (const auto& r : host_records_) tcp_endpoints.push_back(r.tcp_endpoint);
  }
  for (const auto& h : this->hosts()) {
    Map host{{"name", h.name},     {"address", h.address},
             {"cpus", h.num_cpus}, {"gpus", static_cast<int64_t>(h.gpu_ids.size())},
             {"alive", h.alive},   {"agent_pid", static_cast<int64_t>(h.agent_pid)}};
    if (h.index < free.size()) host.emplace_back("reserved", free[h.index]);
    if (h.index < tcp_endpoints.size()) host.emplace_back("tcp_endpoint", tcp_endpoints[h.index]);
    for (const auto& m : memory)
      if (m.host == h.name) {
        host.emplace_back("memory_total", m.total_bytes);
        host.emplace_back("memory_available", m.available_bytes);
        Map groups;
        for (const auto& [g, b] : m.group_bytes) groups.emplace_back(g, b);
        host.emplace_back("group_memory", std::move(groups));
      }
    hosts.push_back(std::move(host));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Array workers(dead_.begin(), dead_.end());
  for (const auto& [name, w] : workers_)
    workers.push_back(Map{{"name", name},
                          {"group", w->group},
                          {"rank", w->rank},
                          {"class", w->class_name()},
                          {"host", w->host_name()},
                          {"pid", static_cast<int64_t>(w->pid())},
                          {"alive", w->alive()}});
  return Map{
      {"session", session_dir_}, {"hosts", std::move(hosts)}, {"workers", std::move(workers)}};
}

std::vector<HostInfo> ClusterImpl::hosts(bool refresh) const {
  if (refresh) {
    try {
      backend_->refresh_hosts();
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << "the host list may be stale: " << e.message();
    }
  }
  std::vector<HostInfo> out;
  std::lock_guard<std::mutex> lock(hosts_mu_);
  for (size_t i = 0; i < host_records_.size(); ++i) {
    const auto& r = host_records_[i];
    HostInfo h;
    h.index = i;
    h.name = r.host_name;
    h.address = r.address;
    h.num_cpus = r.num_cpus;
    h.gpu_ids = r.gpu_ids;
    h.labels = r.labels;
    backend_->describe_host(i, h);
    out.push_back(h);
  }
  return out;
}

}  // namespace troupe::internal
