// Cluster's side of the head's registry of named workers, and attach_worker: a handle to a
// worker another driver started.
#include "common/log.h"
#include "controller/cluster_impl.h"
#include "wire/head_protocol.h"

namespace troupe {
namespace internal {
namespace {

namespace control = wire::control;

constexpr std::chrono::milliseconds kAttachConnectTimeout{10000};

control::NamedWorkerRecord to_record(const NamedWorker& w) {
  return control::NamedWorkerRecord{w.name_space, w.name,         w.detached, w.host,
                                    w.worker,     w.tcp_endpoint, w.pid,      w.info};
}

NamedWorker from_record(const control::NamedWorkerRecord& r) {
  return NamedWorker{r.ns, r.name, r.detached, r.host, r.worker, r.tcp_endpoint, r.pid, r.info};
}

}  // namespace

std::optional<NamedWorker> ClusterImpl::register_name(const NamedWorker& record, bool update) {
  control::NameRegister m{to_record(record), update};
  control::NamedWorkerRecord::from(m.record.to_value());  // the head's checks, before sending
  auto reply = control::NameRegisterReply::from(
      head_client().ask_names(control::NameRegister::kMethod, m.to_map()));
  if (reply.registered) return std::nullopt;
  return from_record(reply.existing);
}

std::optional<NamedWorker> ClusterImpl::lookup_name(const std::string& name_space,
                                                    const std::string& name) {
  control::NameKey k{name_space, name, std::nullopt};
  Value v = head_client().ask_names(control::NameKey::kLookup, k.to_map());
  if (v.is_nil()) return std::nullopt;
  return from_record(control::NamedWorkerRecord::from(v));
}

std::vector<NamedWorker> ClusterImpl::list_names() {
  std::vector<NamedWorker> out;
  for (auto& e :
       control::NameList::reply_from(head_client().ask_names(control::NameList::kMethod, {}))) {
    NamedWorker w = from_record(e.record);
    w.held_by = std::move(e.owner);
    out.push_back(std::move(w));
  }
  return out;
}

bool ClusterImpl::remove_name(const std::string& name_space, const std::string& name,
                              const std::optional<std::string>& worker) {
  control::NameKey k{name_space, name, worker};
  Value v = head_client().ask_names(control::NameKey::kRemove, k.to_map());
  if (!v.is_bool())
    throw Error(ErrorCode::kProtocol, "name_remove reply: expected a bool, got " +
                                          std::string(value_type_name(v.type())));
  return v.as_bool();
}

Worker ClusterImpl::attach_worker(const NamedWorker& record, const std::string& class_name) {
  if (record.worker.empty() || record.tcp_endpoint.empty())
    throw Error(ErrorCode::kInvalidArgument, "attach_worker: the record of '" + record.name +
                                                 "' names no started worker (worker '" +
                                                 record.worker + "', endpoint '" +
                                                 record.tcp_endpoint + "')");
  size_t host = SIZE_MAX;
  for (const auto& h : hosts())
    if (h.name == record.host) host = h.index;
  if (host == SIZE_MAX)
    throw Error(ErrorCode::kInvalidArgument,
                "attach_worker: this cluster has no host named '" + record.host + "'");
  std::shared_ptr<AgentClient> agent_client = agent(host);  // throws
  auto worker =
      std::make_shared<WorkerState>(loop_->context(), record.worker, class_name, host, record.host);
  worker->agent = agent_client;
  worker->agent_name = record.worker;
  worker->outlives_driver = true;
  worker->metrics = metrics_;
  worker->timeline_scope = timeline_scope_;
  worker->on_started(static_cast<pid_t>(record.pid), 0, {}, "", record.tcp_endpoint);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) throw Error(ErrorCode::kShutdown, "the cluster is shut down");
    if (auto it = workers_.find(record.worker); it != workers_.end() && it->second->alive())
      return Access::worker(it->second);  // attached already
    std::weak_ptr<WorkerState> weak = worker;
    worker->on_dead = [this, weak] {
      if (auto w = weak.lock()) forget(w);
    };
    workers_[record.worker] = worker;
  }
  connect_worker_(record.tcp_endpoint, token_, kAttachConnectTimeout,
                  [worker](std::shared_ptr<WorkerClient> client, const Error* error) {
                    if (error) {
                      worker->mark_dead(worker->death_error("cannot connect: " + error->message()));
                      return;
                    }
                    worker->on_connected(std::move(client), {}, /*construct=*/false);
                  });
  return Access::worker(worker);
}

}  // namespace internal

std::optional<NamedWorker> Cluster::register_name(const NamedWorker& record, bool update) {
  return impl_->register_name(record, update);
}
std::optional<NamedWorker> Cluster::lookup_name(const std::string& name_space,
                                                const std::string& name) {
  return impl_->lookup_name(name_space, name);
}
std::vector<NamedWorker> Cluster::list_names() { return impl_->list_names(); }
bool Cluster::remove_name(const std::string& name_space, const std::string& name,
                          const std::optional<std::string>& worker) {
  return impl_->remove_name(name_space, name, worker);
}
Worker Cluster::attach_worker(const NamedWorker& record, const std::string& class_name) {
  return impl_->attach_worker(record, class_name);
}

}  // namespace troupe
